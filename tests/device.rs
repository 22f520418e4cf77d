//! Device selection, discovery, info, memory pooling and device limits.
#![cfg(not(target_arch = "wasm32"))]

use gpukit::{Backend, Device, DeviceType, Error};

fn gpu() -> Device {
    let backend = if cfg!(target_os = "macos") {
        Backend::Metal
    } else {
        Backend::Vulkan
    };
    Device::with_backend_blocking(backend)
        .unwrap_or_else(|e| panic!("needs a {backend} adapter (make test installs lavapipe): {e}"))
}

#[test]
fn discovery_reports_every_backend_with_reasons() {
    let reports = gpukit::blocking::discover_blocking();
    let names: Vec<Backend> = reports.iter().map(|r| r.backend).collect();
    assert_eq!(names, Backend::ALL.to_vec());
    for r in &reports {
        assert_eq!(r.available, r.reason.is_none(), "{r:?}");
        if !r.available {
            assert!(
                !r.reason.as_deref().unwrap_or("").is_empty(),
                "an unavailable backend says why: {r:?}"
            );
        }
    }
    let cpu = reports.iter().find(|r| r.backend == Backend::Cpu).unwrap();
    assert!(cpu.available && cpu.devices.len() == 1);
    if cfg!(target_os = "linux") {
        let metal = reports
            .iter()
            .find(|r| r.backend == Backend::Metal)
            .unwrap();
        assert!(
            metal
                .reason
                .as_deref()
                .unwrap()
                .contains("not on this platform"),
            "{metal:?}"
        );
        let vulkan = reports
            .iter()
            .find(|r| r.backend == Backend::Vulkan)
            .unwrap();
        assert!(
            vulkan.available,
            "make test installs lavapipe, so Vulkan must be found: {vulkan:?}"
        );
    }
    let webgpu = reports
        .iter()
        .find(|r| r.backend == Backend::WebGpu)
        .unwrap();
    assert!(!webgpu.available && webgpu.reason.as_deref().unwrap().contains("browser"));
    // Automatic selection recommends a GPU backend whenever one is available.
    let any_gpu = reports
        .iter()
        .any(|r| r.available && r.backend != Backend::Cpu);
    assert_eq!(gpukit::recommended(&reports) != Backend::Cpu, any_gpu);
}

#[test]
fn automatic_selection_prefers_a_usable_adapter_over_the_cpu() {
    if std::env::var("GPUKIT_BACKEND").is_ok() {
        panic!("unset GPUKIT_BACKEND to run this test: it checks automatic selection");
    }
    let reports = gpukit::blocking::discover_blocking();
    let d = Device::new_blocking().unwrap();
    let best = reports
        .iter()
        .flat_map(|r| &r.devices)
        .filter(|f| f.unusable.is_none() && f.info.backend == gpukit::recommended(&reports))
        .map(|f| &f.info)
        .next()
        .expect("make test installs lavapipe, so an adapter is recommended");
    assert!(
        d.info().selection.starts_with("automatic"),
        "{}",
        d.info().selection
    );
    match &d.info().policy {
        // A hardware adapter is simply used.
        None => {
            assert!(!best.software, "a software adapter needs a measured policy");
            assert_eq!(d.info().backend, best.backend);
        }
        // A software adapter is measured against the CPU, and the faster one runs.
        Some(p) => {
            assert!(best.software, "only software adapters are measured");
            let want = if p.prefers_cpu() {
                Backend::Cpu
            } else {
                best.backend
            };
            assert_eq!(d.info().backend, want, "{}", d.info().selection);
            assert!(d.info().selection.contains("measured policy"));
        }
    }
}

#[test]
fn a_software_adapter_is_measured_once_and_remembered() {
    let reports = gpukit::blocking::discover_blocking();
    let software_only = reports
        .iter()
        .flat_map(|r| &r.devices)
        .filter(|f| f.unusable.is_none() && f.info.backend.is_wgpu())
        .all(|f| f.info.software);
    let first = Device::new_blocking().unwrap();
    if !software_only {
        assert!(first.info().policy.is_none());
        return;
    }
    let p = first
        .info()
        .policy
        .clone()
        .expect("measured on a software adapter");
    for c in [&p.adapter_costs, &p.cpu_costs] {
        let all = [
            c.round_trip_us,
            c.op_us,
            c.upload_gbps,
            c.read_gbps,
            c.add_gelems,
            c.matmul_gflops,
        ];
        assert!(all.iter().all(|v| v.is_finite() && *v > 0.0), "{c:?}");
    }
    // Timings never repeat exactly: equal numbers mean the second device reused the first
    // measurement (in memory here; on disk in the cache file for later processes).
    let second = Device::new_blocking().unwrap();
    assert_eq!(second.info().policy.as_ref(), Some(&p));
    if let Some(dir) = std::env::var_os("GPUKIT_CACHE_DIR") {
        let file = std::path::Path::new(&dir).join("dispatch-policy.json");
        let text = std::fs::read_to_string(&file).expect("the policy is saved");
        assert!(text.contains(&p.adapter), "{text}");
    }
}

#[test]
fn gpu_never_falls_back_to_the_cpu() {
    let d = Device::gpu_blocking().expect("make test installs lavapipe, so a GPU adapter exists");
    assert!(d.info().backend.is_wgpu(), "{:?}", d.info());
    // Moving data between devices goes through the host and keeps shape and values.
    let t = Device::cpu()
        .tensor(&[1.0, -2.0, 3.0, -4.0], &[2, 2])
        .unwrap();
    let g = t.to_device_blocking(&d).unwrap();
    assert_eq!(g.shape(), &[2, 2]);
    assert_eq!(
        g.relu().unwrap().read_blocking().unwrap(),
        vec![1.0, 0.0, 3.0, 0.0]
    );
}

#[test]
fn info_describes_the_adapter_and_its_limits() {
    let d = gpu();
    let info = d.info();
    assert!(info.backend.is_wgpu());
    assert!(!info.adapter.is_empty() && !info.vendor.is_empty());
    assert!(
        info.limits.max_storage_binding >= 128 << 20,
        "{:?}",
        info.limits
    );
    assert!(info.limits.max_buffer >= info.limits.max_storage_binding.min(256 << 20));
    assert!(info.limits.invocations_per_workgroup >= 256 && info.limits.workgroup_storage >= 16384);
    assert!(info.selection.contains("explicit"));
    let name = info.adapter.to_lowercase();
    if name.contains("llvmpipe") || name.contains("swiftshader") {
        assert!(info.software && info.device_type == DeviceType::Cpu);
    }
    let json = serde_json::to_value(info).unwrap();
    assert!(json["limits"]["max_storage_binding"].as_u64().unwrap() > 0);
    let cpu = Device::cpu();
    assert!(cpu.info().software && cpu.info().backend == Backend::Cpu);
}

#[test]
fn explicit_choices_that_cannot_run_are_errors_not_substitutes() {
    // CUDA where it runs is CUDA itself; elsewhere an error, never another backend.
    match Device::with_backend_blocking(Backend::Cuda) {
        Ok(d) => assert_eq!(d.info().backend, Backend::Cuda),
        Err(e) => assert!(
            matches!(
                e,
                Error::BackendUnavailable {
                    backend: Backend::Cuda,
                    ..
                }
            ),
            "{e}"
        ),
    }
    let e = Device::with_backend_blocking(Backend::WebGpu).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BackendUnavailable {
                backend: Backend::WebGpu,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_unavailable());
    if cfg!(target_os = "linux") {
        let e = Device::with_backend_blocking(Backend::Metal).unwrap_err();
        assert!(e.to_string().contains("not on this platform"), "{e}");
    }
    assert!(matches!(
        "vulkann".parse::<Backend>().unwrap_err(),
        Error::UnknownBackend { .. }
    ));
    assert_eq!("VULKAN".parse::<Backend>().unwrap(), Backend::Vulkan);
}

#[test]
fn dropped_buffers_are_reused_and_pipelines_are_not_rebuilt() {
    let d = gpu();
    let x = vec![1.5f32; 10_000];
    let t = d.tensor(&x, &[10_000]).unwrap();
    let y = t.relu().unwrap();
    assert_eq!(y.read_blocking().unwrap(), x);
    let before = d.memory_stats();
    drop(y);
    d.synchronize_blocking().unwrap();
    for _ in 0..20 {
        let y = t.relu().unwrap();
        assert_eq!(y.read_blocking().unwrap()[9_999], 1.5);
    }
    let after = d.memory_stats();
    assert_eq!(
        after.allocations, before.allocations,
        "no new buffers for repeated ops: {before:?} -> {after:?}"
    );
    assert!(
        after.reuses >= before.reuses + 20,
        "{before:?} -> {after:?}"
    );
    d.release_cached_memory();
    assert_eq!(d.memory_stats().pooled_bytes, 0);
}

/// A tensor larger than the storage-binding limit runs elementwise ops in chunks, and ops that
/// need the whole tensor in one binding say which limit stops them.
#[test]
fn tensors_over_the_binding_limit() {
    let d = gpu();
    let limit = d.info().limits.max_storage_binding;
    if limit > 512 << 20 {
        eprintln!("SKIPPED: the binding limit ({limit} bytes) is too large to exceed in a test; lavapipe's is 128 MiB");
        return;
    }
    let n = (limit / 4) as usize + 4099;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 - 500.0).collect();
    let t = d.tensor(&x, &[n]).unwrap();
    let y = t.relu().unwrap().read_blocking().unwrap();
    assert!(
        y.iter().zip(&x).all(|(a, b)| *a == b.max(0.0)),
        "chunked relu"
    );
    let row: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let r = d.tensor(&row, &[1000]).unwrap();
    let z = t.reshape(&[n / 1000, 1000]);
    if let Ok(z) = z {
        let s = z.sub(&r).unwrap().read_blocking().unwrap();
        assert!(
            s.iter()
                .enumerate()
                .all(|(i, v)| *v == x[i] - row[i % 1000]),
            "chunked broadcast"
        );
    }
    let sum = t.add(&t).unwrap().read_blocking().unwrap();
    assert!(
        sum.iter().zip(&x).all(|(a, b)| *a == 2.0 * b),
        "chunked add"
    );
    let e = t.softmax().unwrap_err();
    assert!(
        matches!(
            e,
            Error::LimitExceeded {
                limit: "max_storage_buffer_binding_size",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("max_storage_buffer_binding_size"));
}

/// The autotuner times every tile that fits the adapter, keeps the fastest, and answers the
/// same class from its record afterwards; the CPU backend has nothing to tune.
#[test]
fn autotuner_times_every_fitting_tile_and_remembers_the_fastest() {
    use gpukit::{MatmulTile, Precision};
    let dev = gpu();
    // Sizes of a class no other test uses, so this run may be the one that tunes it.
    let (m, k, n) = (600, 40, 70);
    let record = dev
        .tune_matmul_blocking(m, k, n, Precision::F32)
        .unwrap()
        .expect("a wgpu device has tiles");
    assert!(
        record.class.starts_with("f32 m:513-1024 n:65-512 k:1-64"),
        "{record:?}"
    );
    let wg_bytes = dev.info().limits.workgroup_storage;
    let fitting: Vec<MatmulTile> = MatmulTile::CANDIDATES
        .into_iter()
        .filter(|t| t.workgroup_bytes(false) <= wg_bytes)
        .collect();
    let timed: Vec<MatmulTile> = record.timings_us.iter().map(|(t, _)| *t).collect();
    assert_eq!(timed, fitting, "every fitting tile is timed");
    assert!(record
        .timings_us
        .iter()
        .all(|(_, us)| us.is_finite() && *us > 0.0));
    let fastest = record
        .timings_us
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap()
        .0;
    assert_eq!(record.best, fastest);
    assert!(record.best_tflops() > 0.0);
    // The same class again is the same record, not a new tuning run.
    let again = dev
        .tune_matmul_blocking(m + 1, k + 1, n + 1, Precision::F32)
        .unwrap()
        .unwrap();
    assert_eq!(again, record);
    assert!(dev.tuning().contains(&record), "{:?}", dev.tuning());
    assert!(Device::cpu()
        .tune_matmul_blocking(m, k, n, Precision::F32)
        .unwrap()
        .is_none());
    assert!(Device::cpu().tuning().is_empty());
}

/// The batch's blocking twins give what the async calls give.
#[test]
fn batch_blocking_twins() {
    let dev = gpu();
    let mut b = dev.batch();
    let x = b.upload(&[1.0, -2.0, 3.0], &[3]).unwrap();
    let y = b.relu(x).unwrap();
    let y = b.scale(y, 2.0).unwrap();
    b.output(y).unwrap();
    assert_eq!(b.run_blocking().unwrap().get(y).unwrap(), &[2.0, 0.0, 6.0]);
    let mut g = b.compile().unwrap();
    let r = g.run_blocking(&[(x, &[-1.0, 4.0, 0.5][..])]).unwrap();
    assert_eq!(r.get(y).unwrap(), &[0.0, 8.0, 1.0]);
}

/// Batches from several threads on one device take turns, and each gets its own results.
#[test]
fn batches_from_several_threads_share_a_device() {
    let dev = gpu();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let dev = &dev;
                s.spawn(move || {
                    for round in 0..5 {
                        let v = (t * 10 + round) as f32;
                        let mut b = dev.batch();
                        let x = b.upload(&[v, -v, 2.0 * v], &[3]).unwrap();
                        let y = b.relu(x).unwrap();
                        let y = b.scale(y, 0.5).unwrap();
                        b.output(y).unwrap();
                        let mut g = b.compile().unwrap();
                        let r = g.run_blocking(&[(x, &[v, v, -v][..])]).unwrap();
                        assert_eq!(r.get(y).unwrap(), &[0.5 * v, 0.5 * v, 0.0]);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

/// The devices this machine runs: the CPU, the wgpu adapter `make test` installs, and CUDA
/// where it exists (printing SKIPPED where it does not).
fn every_device() -> Vec<Device> {
    let mut devices = vec![Device::cpu(), gpu()];
    match Device::with_backend_blocking(Backend::Cuda) {
        Ok(d) => devices.push(d),
        Err(e) if std::env::var_os("GPUKIT_REQUIRE_CUDA").is_some() => {
            panic!("GPUKIT_REQUIRE_CUDA is set but CUDA cannot run: {e}")
        }
        Err(e) => {
            // Written past the test harness's capture, so every run shows the skip and why.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED (cuda part): {e}");
        }
    }
    devices
}

#[test]
fn the_profiler_times_each_op_on_every_backend() {
    for d in every_device() {
        let x = d.tensor(&vec![0.5f32; 4096], &[64, 64]).unwrap();
        let profiler = d.profiler();
        let y = x.relu().unwrap().relu().unwrap();
        let z = y.matmul(&x).unwrap();
        z.read_blocking().unwrap();
        let summary = profiler.summary().unwrap();
        let name = &d.info().adapter;
        let relu = summary
            .iter()
            .find(|r| r.op == "relu")
            .expect("relu was profiled");
        assert_eq!(relu.count, 2, "{name}: {summary:?}");
        assert!(relu.min_us > 0.0 && relu.min_us <= relu.mean_us && relu.mean_us <= relu.max_us);
        assert_eq!(relu.rate_unit, "GB/s");
        let mm = summary
            .iter()
            .find(|r| r.op == "matmul")
            .expect("matmul was profiled");
        assert_eq!((mm.count, mm.rate_unit), (1, "GFLOP/s"), "{name}");
        assert!(mm.rate > 0.0, "{name}: {mm:?}");
        assert!(profiler.report().unwrap().contains("matmul"));
        profiler.reset();
        assert!(profiler.summary().unwrap().is_empty());
        drop(profiler);
        // Off again: nothing is recorded without a profiler.
        let again = d.profiler();
        drop(x.relu().unwrap());
        assert_eq!(again.summary().unwrap().len(), 1);
    }
}

#[test]
fn devices_open_by_index_and_out_of_range_is_an_error() {
    assert_eq!(
        Device::with_backend_at_blocking(Backend::Cpu, 0)
            .unwrap()
            .info()
            .backend,
        Backend::Cpu
    );
    for b in [Backend::Cpu, Backend::Cuda, Backend::Vulkan] {
        let e = Device::with_backend_at_blocking(b, 99).unwrap_err();
        assert!(e.is_unavailable(), "{b}: {e}");
    }
    let d = Device::with_backend_at_blocking(Backend::Vulkan, 0).unwrap();
    assert_eq!(d.info().backend, Backend::Vulkan);
}

#[test]
fn the_memory_limit_caps_the_cuda_pool_and_is_refused_elsewhere() {
    for d in every_device() {
        if d.info().backend != Backend::Cuda {
            let e = d.set_memory_limit(Some(1 << 20)).unwrap_err();
            assert!(e.is_input(), "{e}");
            continue;
        }
        let props = d
            .info()
            .cuda
            .clone()
            .expect("CUDA devices report their properties");
        assert!(props.multiprocessors > 0 && props.warp_size == 32 && props.total_memory > 0);
        d.synchronize_blocking().unwrap();
        d.release_cached_memory();
        let held = d.memory_stats().live_bytes;
        d.set_memory_limit(Some(held + (1 << 20))).unwrap();
        let small = d.tensor(&vec![1.0; 1000], &[1000]).unwrap();
        let e = d.tensor(&vec![1.0; 1 << 20], &[1 << 20]).unwrap_err();
        assert!(e.is_resource() && e.to_string().contains("limit"), "{e}");
        d.set_memory_limit(None).unwrap();
        let big = d.tensor(&vec![1.0; 1 << 20], &[1 << 20]).unwrap();
        assert_eq!(
            big.sum().unwrap().read_scalar_blocking().unwrap(),
            (1 << 20) as f32
        );
        drop((small, big));
        let stats = d.memory_stats();
        let again = d.tensor(&vec![2.0; 1 << 20], &[1 << 20]).unwrap();
        assert_eq!(
            d.memory_stats().reuses,
            stats.reuses + 1,
            "the freed buffer is reused"
        );
        assert!(d.memory_stats().hit_rate() > 0.0);
        drop(again);
    }
}

/// An f16 tensor holds half the bytes of an f32 one, as the memory statistics count them, on
/// every GPU backend (the CPU backend keeps no statistics; it stores the same words).
#[test]
fn half_precision_tensors_take_half_the_memory() {
    for dev in every_device().into_iter().skip(1) {
        let n = 1 << 18;
        let full = dev.tensor(&vec![0.25f32; n], &[n]).unwrap();
        dev.synchronize_blocking().unwrap();
        let before = dev.memory_stats().live_bytes;
        let half = full.cast(gpukit::DType::F16).unwrap();
        dev.synchronize_blocking().unwrap();
        let f16_bytes = dev.memory_stats().live_bytes - before;
        drop(half);
        let before = dev.memory_stats().live_bytes;
        let again = full.cast(gpukit::DType::F32).unwrap().scale(1.0).unwrap();
        dev.synchronize_blocking().unwrap();
        let f32_bytes = dev.memory_stats().live_bytes - before;
        drop(again);
        let backend = dev.info().backend;
        assert_eq!(f32_bytes, 4 * n as u64, "{backend:?}");
        assert_eq!(f16_bytes, 2 * n as u64, "{backend:?}");
    }
}
