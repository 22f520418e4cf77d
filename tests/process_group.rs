//! A process group without CUDA: ranks on CPU devices (threads here, as separate processes
//! would be) meet at a loopback rendezvous, and every collective goes over TCP through rank 0.
//! Checked against the host's arithmetic, with a shape mismatch and a missing rank.
#![cfg(not(target_arch = "wasm32"))]

use std::time::Duration;

use gpukit::{Device, ProcessGroup, ReduceOp};

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    format!("127.0.0.1:{}", l.local_addr().expect("its address").port())
}

/// Runs `body(group)` on `world` ranks, each a thread with its own CPU device.
fn ranks<T: Send + 'static>(
    world: usize,
    body: impl Fn(ProcessGroup) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let addr = free_addr();
    let threads: Vec<_> = (0..world)
        .map(|rank| {
            let (addr, body) = (addr.clone(), body.clone());
            std::thread::spawn(move || {
                let g =
                    ProcessGroup::new(Device::cpu(), rank, world, &addr, Duration::from_secs(20))
                        .expect("the rank joins");
                assert!(!g.uses_nccl());
                body(g)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a rank thread"))
        .collect()
}

#[test]
fn collectives_over_tcp_match_the_host() {
    let world = 3;
    let results = ranks(world, |g| {
        let r = g.rank();
        // Rank r holds [6, 2] of r * 100 + i, with a NaN on rank 1.
        let mut data: Vec<f32> = (0..12).map(|i| (r * 100 + i) as f32).collect();
        if r == 1 {
            data[3] = f32::NAN;
        }
        let t = g.device().tensor(&data, &[6, 2]).unwrap();
        let sum = g
            .all_reduce(&t, ReduceOp::Sum)
            .unwrap()
            .read_blocking()
            .unwrap();
        let max = g
            .all_reduce(&t, ReduceOp::Max)
            .unwrap()
            .read_blocking()
            .unwrap();
        let root = g.broadcast(&t, 2).unwrap().read_blocking().unwrap();
        let gathered = g.all_gather(&t).unwrap();
        let scattered = g.reduce_scatter(&t, ReduceOp::Sum).unwrap();
        (
            r,
            sum,
            max,
            root,
            gathered.shape().to_vec(),
            gathered.read_blocking().unwrap(),
            scattered.shape().to_vec(),
            scattered.read_blocking().unwrap(),
        )
    });
    for (r, sum, max, root, gshape, gathered, sshape, scattered) in results {
        for i in 0..12 {
            let want: f32 = (0..3).map(|k| (k * 100 + i) as f32).sum();
            if i == 3 {
                assert!(
                    sum[i].is_nan() && max[i].is_nan(),
                    "rank {r}: NaN propagates"
                );
            } else {
                assert_eq!(sum[i], want, "rank {r} sum[{i}]");
                assert_eq!(max[i], (200 + i) as f32, "rank {r} max[{i}]");
            }
            assert_eq!(root[i], (200 + i) as f32, "rank {r} broadcast[{i}]");
        }
        assert_eq!(gshape, [18, 2]);
        assert_eq!(gathered[12..24][0], 100.0);
        assert_eq!(sshape, [2, 2]);
        // Rank r keeps rows 2r..2r+2 of the sum.
        let want: Vec<f32> = (4 * r..4 * r + 4)
            .map(|i| (0..3).map(|k| (k * 100 + i) as f32).sum())
            .collect();
        for (i, (g, w)) in scattered.iter().zip(&want).enumerate() {
            // Element 3 (rank 0's part) holds rank 1's NaN.
            let nan = r == 0 && i == 3;
            assert!(
                if nan { g.is_nan() } else { g == w },
                "rank {r} reduce_scatter[{i}]: {g}"
            );
        }
    }
}

#[test]
fn a_shape_mismatch_is_an_error_on_every_rank() {
    let errors = ranks(2, |g| {
        let rows = 2 + g.rank();
        let t = g.device().tensor(&vec![1.0; rows], &[rows]).unwrap();
        g.all_reduce(&t, ReduceOp::Sum)
            .map(drop)
            .unwrap_err()
            .to_string()
    });
    for e in errors {
        assert!(e.contains("rank 1's tensor is [3]"), "{e}");
    }
}

#[test]
fn a_rank_that_never_calls_times_out_at_rank_zero() {
    let addr = free_addr();
    let a = addr.clone();
    let lazy = std::thread::spawn(move || {
        let g = ProcessGroup::new(Device::cpu(), 1, 2, &a, Duration::from_secs(20)).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(g);
    });
    let g = ProcessGroup::new(Device::cpu(), 0, 2, &addr, Duration::from_millis(500)).unwrap();
    let t = g.device().tensor(&[1.0], &[1]).unwrap();
    let e = g.all_reduce(&t, ReduceOp::Sum).unwrap_err();
    assert!(e.to_string().contains("rank 1 did not take part"), "{e}");
    lazy.join().unwrap();
}
