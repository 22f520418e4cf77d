//! Device loss. A device is lost by `Device::destroy`, or when the backend reports a loss at a
//! read or `synchronize` (a driver reset, a faulting kernel); from then on every op, upload,
//! read, batch and `synchronize` on it is [`Error::DeviceLost`]. Every op checks it where it
//! checks its output's size (`Device::check_output`), so backends need no code of their own,
//! except wgpu's `destroy`, which releases the pool and destroys the wgpu device.

use std::sync::{Mutex, PoisonError};

use crate::device::Device;
use crate::error::{Error, Result};

/// Why a device was lost, once it is.
#[derive(Default)]
pub(crate) struct Loss(Mutex<Option<String>>);

impl Loss {
    fn set(&self, reason: &str) {
        let mut lost = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        lost.get_or_insert_with(|| reason.to_string());
    }

    fn check(&self) -> Result<()> {
        match &*self.0.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(reason) => Err(Error::DeviceLost {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl Device {
    /// Destroys the device now: its memory is released and every later call on it or its
    /// tensors is [`Error::DeviceLost`] (as after a driver reset). Other devices, and new ones
    /// opened afterwards, are unaffected. On wgpu the adapter's device is destroyed; on CUDA
    /// and the CPU the device stops accepting work, and its memory is freed when the last
    /// handle to it is dropped.
    pub fn destroy(&self) {
        let reason = "destroyed by Device::destroy";
        self.loss().set(reason);
        self.backend().destroy(reason);
    }

    /// For tests of device loss: makes the device fail the way a driver fault does. On CUDA a
    /// kernel writes through an invalid pointer (the context is then lost for good, and with
    /// it every device of this GPU in the process until they are all dropped); elsewhere it is
    /// [`Device::destroy`].
    #[doc(hidden)]
    pub fn inject_fault_for_tests(&self) -> Result<()> {
        if !self.backend().inject_fault()? {
            self.destroy();
        }
        Ok(())
    }

    /// `Error::DeviceLost` once the device is lost.
    pub(crate) fn check_lost(&self) -> Result<()> {
        self.loss().check()
    }

    /// Remembers a loss the backend reported (a driver reset, a faulting kernel), so that
    /// every later call fails the same way even where the backend would not notice.
    pub(crate) fn note_loss<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(Error::DeviceLost { reason }) = &r {
            self.loss().set(reason);
        }
        r
    }
}
