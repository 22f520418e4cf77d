//! Softmax and log-softmax: online (max, sum of exp) pairs per chunk of a row, merged exactly,
//! so long rows split across workgroups without a host round trip.

use super::super::{WgpuBackend, WgpuStorage};
use super::reduce::{RowParams, CHUNK};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;

impl WgpuBackend {
    pub(super) fn encode_softmax(
        &self,
        x: &WgpuStorage,
        rows: usize,
        cols: usize,
        log: bool,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let (rows, cols) = (rows as u64, cols as u64);
        let n = rows * cols;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n == 0 {
            return Ok(s.storage(out));
        }
        s.check_binding("softmax's input", n)?;
        let chunks = cols.div_ceil(CHUNK);
        // Small workgroups on a software adapter (see `softmax_width` in pipelines/constants.rs).
        let narrow = self.shared.software;
        let params = bytemuck::bytes_of(&RowParams {
            rows: u32_of(rows, "softmax rows")?,
            cols: cols as u32,
            chunks: chunks as u32,
            chunk_len: CHUNK as u32,
            extra: n as u32,
            _pad: [0; 3],
        })
        .to_vec();
        if chunks == 1 {
            // Rows of one chunk: one workgroup a row finds its statistics and writes its values.
            s.dispatch(
                &mut st,
                Kernel::SoftmaxRows { log, narrow },
                &params,
                &[whole(xb, n), whole(xb, n), whole(&out, n)],
                rows,
            )?;
            return Ok(s.storage(out));
        }
        let stats = s.alloc(&mut st, rows * chunks * 8)?;
        let stats_bind = || whole(&stats, rows * chunks * 2);
        s.dispatch(
            &mut st,
            Kernel::SoftmaxStats { narrow },
            &params,
            &[whole(xb, n), whole(xb, n), stats_bind()],
            rows * chunks,
        )?;
        let row_stats = if chunks > 1 {
            let combined = s.alloc(&mut st, rows * 8)?;
            s.dispatch(
                &mut st,
                Kernel::SoftmaxCombine { narrow },
                &params,
                &[stats_bind(), stats_bind(), whole(&combined, rows * 2)],
                rows,
            )?;
            st.retire(stats);
            combined
        } else {
            stats
        };
        let binds = [whole(xb, n), whole(&row_stats, rows * 2), whole(&out, n)];
        s.dispatch(
            &mut st,
            Kernel::SoftmaxApply { log },
            &params,
            &binds,
            n.div_ceil(WG),
        )?;
        st.retire(row_stats);
        Ok(s.storage(out))
    }
}
