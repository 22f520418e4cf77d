//! The bind group layouts of the kernels: how many inputs and outputs each binds.

/// How many read-only storage inputs a kernel binds (after the uniform at binding 0, before
/// the one read-write output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Layout {
    OneInput,
    TwoInputs,
    ThreeInputs,
    FourInputs,
    SevenInputs,
    /// One input, two outputs (values and indices).
    OneInputTwoOutputs,
    /// quant_cached.wgsl: quant.wgsl's seven inputs and the cache's row index, then the
    /// product and the cache.
    EightInputsTwoOutputs,
}

impl Layout {
    pub(crate) fn inputs(self) -> usize {
        match self {
            Layout::OneInput => 1,
            Layout::TwoInputs => 2,
            Layout::ThreeInputs => 3,
            Layout::FourInputs => 4,
            Layout::SevenInputs => 7,
            Layout::OneInputTwoOutputs => 1,
            Layout::EightInputsTwoOutputs => 8,
        }
    }

    pub(crate) fn outputs(self) -> usize {
        match self {
            Layout::OneInputTwoOutputs | Layout::EightInputsTwoOutputs => 2,
            _ => 1,
        }
    }
}
