//! The softmax row: W3, the softmax of one long row as a round trip.

use super::elementwise::Inputs;
use super::{time, Ctx, Id, Row};

/// W3: upload one row of 2^20 elements, softmax, read.
pub(crate) fn round_trip(cx: &Ctx, w: &Inputs) -> Result<Row, String> {
    let (device, m) = (&cx.device, w.m);
    let t = time(2, cx.runs, || {
        device
            .tensor(&w.a, &[m])?
            .softmax()?
            .read_blocking()
            .map(drop)
    })?;
    Ok(Ctx::round_trip(
        Id::W3,
        format!("softmax of one {m}-element row, round trip"),
        t,
        "",
    ))
}
