//! `gpukit`: discover backends and devices, show the chosen device, and run benchmarks.
//!
//! ```text
//! gpukit backends [--json]     every backend: available or not, and why
//! gpukit devices  [--json]     every adapter found, usable or not
//! gpukit info     [--json]     the device Device::new() picks, why, and the recommendation
//! gpukit bench    [--json] [--quick] [--backend NAME]
//! gpukit bench-cpu [--json] [--quick]  the CPU backend beside a Rust loop and the gemm crate
//! gpukit bench-group [--json]  all_reduce over every CUDA device (NCCL where it loads)
//! gpukit verify   [--json] [--backend NAME]  every op family checked against the CPU backend
//! gpukit embed    [--json] [--backend NAME] [--model DIR] TEXT...  sentence embeddings
//! gpukit bench-embed [--json] [--backend NAME] [--model DIR]  embedding latency and throughput
//! gpukit bench-chat [--json] [--backend NAME] [--model FILE]  LLM decode and prefill speed
//! gpukit chat     [--json] [--backend NAME] [--model FILE] [options] [PROMPT]  chat with an LLM
//! ```
//! `GPUKIT_BACKEND` chooses the backend as in the library; `GPUKIT_LOG` sets the log level.

#[cfg(native)]
mod baseline;
#[cfg(cuda)]
mod baseline_cuda;
#[cfg(native)]
mod bench;
#[cfg(all(native, feature = "models"))]
mod bench_chat;
#[cfg(all(native, feature = "models"))]
mod bench_embed;
#[cfg(native)]
mod bench_group;
#[cfg(all(native, feature = "models"))]
mod chat;
#[cfg(native)]
mod cpu_bench;
#[cfg(all(native, feature = "models"))]
mod embed;
#[cfg(native)]
mod peer;
#[cfg(native)]
mod report;
#[cfg(native)]
mod verify;

#[cfg(web)]
fn main() {}

#[cfg(native)]
fn main() -> std::process::ExitCode {
    use std::process::ExitCode;

    init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let result = match args.first().map(String::as_str) {
        Some("backends") => report::backends(json),
        Some("devices") => report::devices(json),
        Some("info") => report::info(json),
        Some("bench") => bench::run(&args[1..]),
        Some("bench-cpu") => cpu_bench::run(&args[1..]),
        Some("bench-group") => bench_group::run(&args[1..]),
        Some("verify") => verify::run(&args[1..]),
        #[cfg(feature = "models")]
        Some("embed") => embed::run(&args[1..]),
        #[cfg(feature = "models")]
        Some("chat") => chat::run(&args[1..]),
        #[cfg(feature = "models")]
        Some("bench-chat") => bench_chat::run(&args[1..]),
        #[cfg(feature = "models")]
        Some("bench-embed") => bench_embed::run(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            println!("{}", USAGE);
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpukit: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(native)]
const USAGE: &str =
    "usage: gpukit <backends|devices|info|bench|bench-cpu|bench-group|verify|embed|bench-embed|chat|bench-chat> [--json]
  backends          every backend compiled in: available or not, and why
  devices           every adapter found, with its type, limits and features
  info              the device automatic selection picks (or GPUKIT_BACKEND), and why
  bench [--quick] [--backend NAME]
                    the benchmark workloads (BENCHMARKS.md) on the chosen device
  bench-group       all_reduce over every CUDA device, 1 MB to 1 GB (NCCL where it loads)
  bench-cpu [--quick]
                    the CPU backend's elementwise and matmul throughput beside a plain
                    Rust loop and the gemm crate called directly
  verify [--backend NAME]
                    every op family on the chosen device in verification mode: each result
                    computed again on the CPU backend and compared within the op's tolerance
  embed [--backend NAME] [--model DIR] TEXT...
                    L2-normalised sentence embeddings (all-MiniLM-L6-v2, 384 values) of each
                    TEXT; --json prints {\"model\", \"backend\", \"dim\", \"embeddings\"}
  bench-embed [--backend NAME] [--model DIR]
                    embedding latency at batch 1 and throughput at 128 x 128 tokens
  chat [--backend NAME] [--model FILE] [--max-tokens N] [--temperature T] [--top-k K]
       [--top-p P] [--seed S] [--context N] [--kv-cache f32|f16|bf16]
       [--prompt-precision f32|f16|bf16|tf32] [--raw] [PROMPT]
                    answers from SmolLM2-135M-Instruct, streamed; interactive without PROMPT;
                    --temperature 0 (the default) is greedy; --raw skips the chat template;
                    the prompt's products default to f16 where the device has tensor cores;
                    --json prints {\"model\", \"backend\", \"prompt_ids\", \"ids\", \"text\",
                    \"finish\", \"prefill_tokens_per_s\", \"decode_tokens_per_s\"}
  bench-chat [--backend NAME] [--model FILE] [--kv-cache f32|f16|bf16]
             [--prompt-precision f32|f16|bf16|tf32]
                    LLM decode tokens/s (128 after a 128-token prompt) and prefill tokens/s
                    (a 512-token prompt); scripts/peers/llama_cpp.mjs times llama.cpp alike";

/// A minimal stderr logger: `GPUKIT_LOG=error|warn|info|debug` (default warn).
#[cfg(native)]
fn init_logging() {
    struct Stderr;
    impl log::Log for Stderr {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::max_level()
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) && r.target().starts_with("gpukit") {
                eprintln!("[{}] {}", r.level(), r.args());
            }
        }
        fn flush(&self) {}
    }
    static LOGGER: Stderr = Stderr;
    let level = std::env::var("GPUKIT_LOG")
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(log::LevelFilter::Warn);
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
