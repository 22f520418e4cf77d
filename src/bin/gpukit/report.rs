//! The `backends`, `devices` and `info` commands: readable tables, or JSON.

use gpukit::{Backend, Device, DeviceInfo};

type CliResult = Result<(), String>;

/// Prints rows as left-aligned columns under a header.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for r in rows {
        line(r.clone());
    }
}

fn print_json<T: serde::Serialize>(value: &T) -> CliResult {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 40 {
        "unlimited".into()
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

pub fn backends(json: bool) -> CliResult {
    let reports = gpukit::blocking::discover_blocking();
    if json {
        return print_json(&reports);
    }
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.backend.to_string(),
                if r.available {
                    "yes".into()
                } else {
                    "no".into()
                },
                r.devices
                    .iter()
                    .map(|d| d.info.adapter.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
                r.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&["backend", "available", "devices", "reason"], &rows);
    println!("\nrecommended: {}", gpukit::recommended(&reports));
    Ok(())
}

pub fn devices(json: bool) -> CliResult {
    let reports = gpukit::blocking::discover_blocking();
    let found: Vec<_> = reports.iter().flat_map(|r| r.devices.iter()).collect();
    if json {
        return print_json(&found);
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let f = d.info.features;
            let feats: Vec<&str> = [
                (f.shader_f16, "f16"),
                (f.subgroups, "subgroups"),
                (f.timestamp_query, "timestamps"),
                (f.cooperative_matrix, "coop-matrix"),
            ]
            .into_iter()
            .filter_map(|(on, n)| on.then_some(n))
            .collect();
            vec![
                i.to_string(),
                d.info.backend.to_string(),
                d.info.adapter.clone(),
                d.info.device_type.to_string(),
                if d.info.software {
                    "yes".into()
                } else {
                    "no".into()
                },
                mib(d.info.limits.max_storage_binding),
                feats.join(","),
                d.unusable
                    .clone()
                    .map_or("yes".into(), |u| format!("no: {u}")),
            ]
        })
        .collect();
    table(
        &[
            "#",
            "backend",
            "adapter",
            "type",
            "software",
            "max binding",
            "features",
            "usable",
        ],
        &rows,
    );
    // The full query of each CUDA device (open with Device::with_backend_at(cuda, ordinal)).
    let cuda: Vec<&gpukit::CudaProperties> =
        found.iter().filter_map(|d| d.info.cuda.as_ref()).collect();
    if !cuda.is_empty() {
        println!("\nCUDA devices:");
        let body: Vec<Vec<String>> = cuda
            .iter()
            .map(|p| {
                vec![
                    p.ordinal.to_string(),
                    format!("{}.{}", p.compute_capability.0, p.compute_capability.1),
                    format!("{} / {}", mib(p.free_memory), mib(p.total_memory)),
                    p.multiprocessors.to_string(),
                    format!(
                        "{} KiB ({} opt-in)",
                        p.shared_memory_per_block / 1024,
                        p.shared_memory_per_block_optin / 1024
                    ),
                    format!("{}K", p.registers_per_block / 1024),
                    p.warp_size.to_string(),
                    p.max_threads_per_block.to_string(),
                    format!("{}x{}x{}", p.max_grid[0], p.max_grid[1], p.max_grid[2]),
                    format!("{} MHz", p.clock_khz / 1000),
                    format!("{} MiB", p.l2_bytes >> 20),
                    format!("{:.0} GB/s", p.peak_bandwidth() / 1e9),
                    [
                        (p.ecc, "ecc"),
                        (p.unified_addressing, "uva"),
                        (p.concurrent_kernels, "concurrent"),
                    ]
                    .iter()
                    .filter_map(|(on, n)| on.then_some(*n))
                    .collect::<Vec<_>>()
                    .join(","),
                    format!("{}.{}", p.driver_version.0, p.driver_version.1),
                ]
            })
            .collect();
        table(
            &[
                "ordinal",
                "compute",
                "free / total",
                "SMs",
                "shared/block",
                "regs/block",
                "warp",
                "threads/block",
                "max grid",
                "clock",
                "L2",
                "peak bandwidth",
                "flags",
                "driver",
            ],
            &body,
        );
        // Which GPU reaches which directly, and NCCL where it loads.
        if let Ok(topology) = gpukit::cuda_topology() {
            println!("\npeer access (row reaches column directly):");
            let n = topology.peer_access.len();
            let mut head = vec!["".to_string()];
            head.extend((0..n).map(|j| format!("GPU{j}")));
            let body: Vec<Vec<String>> = topology
                .peer_access
                .iter()
                .enumerate()
                .map(|(i, row)| {
                    let mut r = vec![format!("GPU{i}")];
                    r.extend(row.iter().enumerate().map(|(j, &can)| match (i == j, can) {
                        (true, _) => "X".into(),
                        (false, true) => "yes".into(),
                        (false, false) => "no".into(),
                    }));
                    r
                })
                .collect();
            let head: Vec<&str> = head.iter().map(String::as_str).collect();
            table(&head, &body);
            match topology.nccl {
                Some(v) => println!("NCCL {v}: groups of CUDA devices run their collectives on it"),
                None => println!("NCCL not found: groups stage their collectives through rank 0"),
            }
        }
    }
    Ok(())
}

pub fn info(json: bool) -> CliResult {
    let device = Device::new_blocking().map_err(|e| e.to_string())?;
    let reports = gpukit::blocking::discover_blocking();
    let recommended = gpukit::recommended(&reports);
    let info = device.info();
    if json {
        return print_json(&serde_json::json!({ "device": info, "recommended": recommended }));
    }
    print_info(info);
    println!("recommended backend:  {recommended}");
    if info.policy.as_ref().is_some_and(|p| p.prefers_cpu()) {
        println!(
            "note: the {recommended} adapter is a software one and measured slower than the CPU \
             backend; GPUKIT_BACKEND={recommended} uses it anyway"
        );
    } else if info.backend == Backend::Cpu && recommended != Backend::Cpu {
        println!(
            "note: a GPU backend ({recommended}) is available; unset GPUKIT_BACKEND to use it"
        );
    }
    Ok(())
}

pub fn print_info(info: &DeviceInfo) {
    let l = &info.limits;
    let f = &info.features;
    let rows = [
        ("backend", info.backend.to_string()),
        ("adapter", info.adapter.clone()),
        ("vendor", info.vendor.clone()),
        ("device type", info.device_type.to_string()),
        (
            "software",
            if info.software {
                "yes (expect it to be much slower than a GPU)".into()
            } else {
                "no".to_string()
            },
        ),
        ("driver", info.driver.clone()),
        ("max storage binding", mib(l.max_storage_binding)),
        ("max buffer", mib(l.max_buffer)),
        (
            "workgroup storage",
            format!("{} KiB", l.workgroup_storage / 1024),
        ),
        (
            "invocations/workgroup",
            l.invocations_per_workgroup.to_string(),
        ),
        (
            "features",
            format!(
                "shader-f16: {}, subgroups: {}, timestamp-query: {}, cooperative-matrix: {}",
                f.shader_f16, f.subgroups, f.timestamp_query, f.cooperative_matrix
            ),
        ),
        (
            "memory",
            info.memory_bytes.map_or("not reported".into(), mib),
        ),
        ("chosen because", info.selection.clone()),
    ];
    for (k, v) in rows {
        println!("{:<23} {v}", format!("{k}:"));
    }
    if let Some(p) = &info.policy {
        let side = |c: &gpukit::Costs| {
            format!(
                "round trip {:.0} us, +{:.1} us/op, upload {:.2} GB/s, read {:.2} GB/s, add {:.3} Gelem/s, matmul {:.2} GFLOP/s",
                c.round_trip_us, c.op_us, c.upload_gbps, c.read_gbps, c.add_gelems, c.matmul_gflops
            )
        };
        let from = |v: Option<usize>, unit: &str| {
            v.map_or("never (the CPU wins)".into(), |s| {
                format!("from {s} {unit}")
            })
        };
        println!("{:<23} {}", "policy, adapter:", side(&p.adapter_costs));
        println!("{:<23} {}", "policy, cpu:", side(&p.cpu_costs));
        println!(
            "{:<23} elementwise {}; matmul {}",
            "adapter faster:",
            from(p.elementwise_gpu_from, "elements"),
            from(p.matmul_gpu_from, "square")
        );
    }
}
