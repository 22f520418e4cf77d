//! The rendezvous of one process per device: rank 0 listens on `MASTER_ADDR:MASTER_PORT`,
//! every other rank connects (retrying until the deadline) and says its rank and whether it
//! can run NCCL, and rank 0 sends each of them the same payload (the transport rank 0 chose
//! and NCCL's unique id). The connections stay open for the collectives that go over TCP. Any rank missing at the deadline, a rank
//! named twice or out of range, or a short read is a clear error, never a wait without end.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Bytes every rank receives.
pub(crate) const PAYLOAD: usize = 129;

fn failed(reason: String) -> Error {
    Error::InvalidArgument {
        op: "rendezvous",
        reason,
    }
}

/// Rank 0: waits for the `world - 1` other ranks, then sends each the payload that
/// `payload(every other rank can run NCCL)` makes; returns it and their connections, by rank
/// (index 0 is rank 1).
pub(crate) fn serve(
    addr: &str,
    world: usize,
    payload: impl FnOnce(bool) -> Result<[u8; PAYLOAD]>,
    timeout: Duration,
) -> Result<([u8; PAYLOAD], Vec<TcpStream>)> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| failed(format!("rank 0 could not listen on {addr}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| failed(format!("{addr}: {e}")))?;
    let deadline = Instant::now() + timeout;
    let mut joined = vec![false; world];
    joined[0] = true;
    let mut peers = Vec::with_capacity(world.saturating_sub(1));
    let mut all_capable = true;
    while peers.len() + 1 < world {
        match listener.accept() {
            Ok((mut stream, from)) => {
                let (rank, capable) = read_rank(&mut stream, deadline)
                    .map_err(|e| failed(format!("a rank from {from}: {e}")))?;
                all_capable &= capable;
                match joined.get_mut(rank) {
                    Some(seen) if !*seen => *seen = true,
                    Some(_) => return Err(failed(format!("rank {rank} joined twice"))),
                    None => {
                        return Err(failed(format!("rank {rank} is outside a world of {world}")))
                    }
                }
                peers.push((rank, stream));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    let missing: Vec<usize> = (0..world).filter(|&r| !joined[r]).collect();
                    return Err(failed(format!(
                        "ranks {missing:?} did not join {addr} within {timeout:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(failed(format!("{addr}: {e}"))),
        }
    }
    peers.sort_by_key(|(rank, _)| *rank);
    let payload = payload(all_capable)?;
    for (_, p) in &mut peers {
        p.write_all(&payload)
            .map_err(|e| failed(format!("sending the id: {e}")))?;
    }
    Ok((payload, peers.into_iter().map(|(_, p)| p).collect()))
}

fn read_rank(stream: &mut TcpStream, deadline: Instant) -> std::io::Result<(usize, bool)> {
    stream.set_nonblocking(false)?;
    let left = deadline.saturating_duration_since(Instant::now());
    stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let mut b = [0u8; 5];
    stream.read_exact(&mut b)?;
    Ok((
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
        b[4] == 1,
    ))
}

/// Any other rank: connects to rank 0 (retrying until the deadline), says `rank`, and returns
/// the payload rank 0 sends and the connection.
pub(crate) fn join(
    addr: &str,
    rank: usize,
    nccl_capable: bool,
    timeout: Duration,
) -> Result<([u8; PAYLOAD], TcpStream)> {
    let deadline = Instant::now() + timeout;
    let rank32 = u32::try_from(rank).map_err(|_| failed(format!("rank {rank} is too large")))?;
    loop {
        let target = addr
            .to_socket_addrs()
            .map_err(|e| failed(format!("{addr}: {e}")))?
            .next()
            .ok_or_else(|| failed(format!("{addr} names no address")))?;
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStream::connect_timeout(&target, left.max(Duration::from_millis(1))) {
            Ok(mut stream) => {
                let io = |e: std::io::Error| failed(format!("rank {rank} with rank 0: {e}"));
                let mut hello = rank32.to_le_bytes().to_vec();
                hello.push(u8::from(nccl_capable));
                stream.write_all(&hello).map_err(io)?;
                let left = deadline.saturating_duration_since(Instant::now());
                stream
                    .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                    .map_err(io)?;
                let mut payload = [0u8; PAYLOAD];
                stream.read_exact(&mut payload).map_err(io)?;
                return Ok((payload, stream));
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(failed(format!(
                    "rank {rank} could not reach rank 0 at {addr} within {timeout:?}: {e}"
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> String {
        // A free port: bind to 0, read it, release it.
        let l = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        format!("127.0.0.1:{}", l.local_addr().expect("its address").port())
    }

    #[test]
    fn every_rank_gets_rank_zeros_payload() {
        let addr = addr();
        let payload = [7u8; PAYLOAD];
        // Whether every other rank can run NCCL reaches rank 0's payload maker.
        let joiners: Vec<_> = (1..4)
            .map(|r| {
                let a = addr.clone();
                std::thread::spawn(move || join(&a, r, true, Duration::from_secs(10)))
            })
            .collect();
        let (sent, peers) =
            serve(&addr, 4, |_| Ok(payload), Duration::from_secs(10)).expect("all ranks join");
        assert_eq!((sent, peers.len()), (payload, 3));
        for j in joiners {
            let (got, _) = j.join().expect("a joiner thread").expect("the payload");
            assert_eq!(got, payload);
        }
    }

    #[test]
    fn a_missing_rank_is_an_error_in_time() {
        let addr = addr();
        let t0 = Instant::now();
        let e = serve(&addr, 2, |_| Ok([0; PAYLOAD]), Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("[1] did not join"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        let e = join(&addr, 1, false, Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().contains("could not reach rank 0"), "{e}");
    }

    #[test]
    fn a_rank_outside_the_world_is_refused() {
        let addr = addr();
        let a = addr.clone();
        let j = std::thread::spawn(move || join(&a, 5, false, Duration::from_secs(5)));
        let e = serve(&addr, 2, |_| Ok([0; PAYLOAD]), Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("outside a world of 2"), "{e}");
        assert!(j.join().expect("the joiner").is_err());
    }
}
