//! The table (or JSON) that `gpukit bench` prints: its rows beside the raw floor and the peer,
//! then the matmul autotuner's records for the adapter.

use gpukit::{Backend, Device};

use crate::bench::{Options, Row};
use crate::report::{print_info, table};

type CliResult = Result<(), String>;

/// Prints the rows as a table (or JSON) with the device and the tuner's records.
pub(crate) fn report(o: &Options, device: &Device, rows: &[Row]) -> CliResult {
    if o.json {
        let out = serde_json::json!({
            "device": device.info(),
            "quick": o.quick,
            "rows": rows,
            "matmul_tuning": device.tuning(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    print_info(device.info());
    println!();
    let fmt = |v: Option<f64>| {
        v.map_or("-".to_string(), |v| match v {
            v if v >= 100.0 => format!("{v:.0}"),
            v if v >= 1.0 => format!("{v:.2}"),
            v => format!("{v:.4}"),
        })
    };
    let with_peer = o.peer.is_some();
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.id.as_str().into(),
                r.workload.clone(),
                fmt(r.value),
                fmt(r.raw),
                r.slowdown_vs_raw.map_or("-".into(), |s| format!("{s:.2}x")),
            ];
            if with_peer {
                row.push(fmt(r.peer));
                row.push(match (r.peer, r.value) {
                    (Some(p), Some(v)) => format!("{:.2}x", p / v),
                    _ => "-".into(),
                });
            }
            row.extend([r.unit.into(), r.note.clone()]);
            row
        })
        .collect();
    let raw_name = if device.info().backend == Backend::Cuda {
        "raw cudarc"
    } else {
        "raw wgpu"
    };
    let mut head = vec!["id", "workload", "gpukit", raw_name, "gpukit/raw"];
    if with_peer {
        head.extend(["trueno", "trueno/gpukit"]);
    }
    head.extend(["unit", "note"]);
    table(&head, &body);
    let tuning = device.tuning();
    if !tuning.is_empty() {
        println!("\nmatmul autotuner, this adapter (us per matmul for each tile; * = chosen):");
        let body: Vec<Vec<String>> = tuning
            .iter()
            .map(|r| {
                let tiles = r
                    .timings_us
                    .iter()
                    .map(|(t, us)| {
                        let mark = if *t == r.best { "*" } else { "" };
                        format!("{t} {us:.0}{mark}")
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                vec![
                    r.class.clone(),
                    format!("{:?}", r.shape),
                    format!("{:.1}", r.best_tflops() * 1e3),
                    tiles,
                ]
            })
            .collect();
        table(
            &["size class", "timed [m, n, k]", "best GFLOP/s", "tiles"],
            &body,
        );
    }
    Ok(())
}
