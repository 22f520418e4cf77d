//! The platform async glue, in one place: a one-shot channel that turns wgpu's callbacks
//! (buffer mapping, submitted-work-done) into futures that work on every target, and the
//! executor-free blocking wait used by the native twins.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    closed: bool,
}

/// The sending half: `send` consumes it; dropping it unsent closes the channel.
pub(crate) struct Sender<T>(Arc<Mutex<Slot<T>>>);

/// The receiving half: a future of `Some(value)`, or `None` if the sender was dropped unsent.
pub(crate) struct Receiver<T>(Arc<Mutex<Slot<T>>>);

/// A channel for exactly one value.
pub(crate) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        waker: None,
        closed: false,
    }));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    pub(crate) fn send(self, value: T) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.value = Some(value);
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.closed = true;
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = slot.value.take() {
            return Poll::Ready(Some(v));
        }
        if slot.closed {
            return Poll::Ready(None);
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Runs a future to completion on this thread (native only): the blocking twins and every
/// blocking wait inside the library go through it.
#[cfg(native)]
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    pollster::block_on(f)
}
