//! The two maintained Reed-Solomon crates side by side, on the shapes storage systems use:
//! `reed-solomon-simd` (O(n log n), SIMD; what `incast::rpc::erasure` decodes with) against
//! `reed-solomon-erasure` (Backblaze's Vandermonde matrix over GF(2^8), with its SIMD C
//! kernels off as packaged). 6+3 and 10+4 with 1 MiB shards: encoding the parity, and the
//! decode an erasure read does when one data shard is missing (rebuilt from one parity).
//!
//! Run: `cargo bench --bench erasure`
//!
//! Before criterion runs, the bench prints the time per MiB of block of each crate over a
//! fixed number of rounds, interleaved, and the ratio.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use reed_solomon_erasure::galois_8::ReedSolomon;

const SHARD: usize = 1 << 20;

fn shards(k: usize) -> Vec<Vec<u8>> {
    (0..k)
        .map(|i| (0..SHARD).map(|j| (j * 31 + i * 7 + j / 4093) as u8).collect())
        .collect()
}

fn simd_encode(k: usize, m: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    reed_solomon_simd::encode(k, m, data).expect("encode")
}

fn rse_encode(rs: &ReedSolomon, k: usize, m: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = data.to_vec();
    all.extend((0..m).map(|_| vec![0u8; SHARD]));
    rs.encode(&mut all).expect("encode");
    all.split_off(k)
}

/// Rebuilds data shard 0 from data 1.. and parity 0.
fn simd_decode(k: usize, m: usize, data: &[Vec<u8>], parity: &[Vec<u8>]) -> Vec<u8> {
    let originals = data.iter().enumerate().skip(1);
    let recovery = std::iter::once((0usize, &parity[0]));
    let mut out = reed_solomon_simd::decode(k, m, originals, recovery).expect("decode");
    out.remove(&0).expect("shard 0 restored")
}

fn rse_decode(rs: &ReedSolomon, data: &[Vec<u8>], parity: &[Vec<u8>]) -> Vec<u8> {
    let mut all: Vec<Option<Vec<u8>>> = data.iter().cloned().map(Some).collect();
    all[0] = None;
    all.push(Some(parity[0].clone()));
    all.extend((1..parity.len()).map(|_| None));
    rs.reconstruct_data(&mut all).expect("reconstruct");
    all[0].take().expect("shard 0 restored")
}

fn bench(c: &mut Criterion) {
    for (k, m) in [(6usize, 3usize), (10, 4)] {
        let data = shards(k);
        let rs = ReedSolomon::new(k, m).expect("codec");
        let parity = simd_encode(k, m, &data);
        assert_eq!(simd_decode(k, m, &data, &parity), data[0]);
        let rse_parity = rse_encode(&rs, k, m, &data);
        assert_eq!(rse_decode(&rs, &data, &rse_parity), data[0]);
        let rounds = 20;
        let mut t = [Duration::ZERO; 4];
        for _ in 0..rounds {
            let s = Instant::now();
            black_box(simd_encode(k, m, &data));
            t[0] += s.elapsed();
            let s = Instant::now();
            black_box(rse_encode(&rs, k, m, &data));
            t[1] += s.elapsed();
            let s = Instant::now();
            black_box(simd_decode(k, m, &data, &parity));
            t[2] += s.elapsed();
            let s = Instant::now();
            black_box(rse_decode(&rs, &data, &rse_parity));
            t[3] += s.elapsed();
        }
        let per_mib = |d: Duration| d.as_secs_f64() * 1e3 / rounds as f64 / k as f64;
        println!("\n{k}+{m}, 1 MiB shards, {rounds} rounds: ms per MiB of block");
        println!(
            "{:<10} {:>22} {:>22} {:>8}",
            "", "reed-solomon-simd", "reed-solomon-erasure", "ratio"
        );
        println!(
            "{:<10} {:>22.3} {:>22.3} {:>8.2}",
            "encode",
            per_mib(t[0]),
            per_mib(t[1]),
            per_mib(t[1]) / per_mib(t[0])
        );
        println!(
            "{:<10} {:>22.3} {:>22.3} {:>8.2}",
            "decode",
            per_mib(t[2]),
            per_mib(t[3]),
            per_mib(t[3]) / per_mib(t[2])
        );

        let mut g = c.benchmark_group(format!("rs_{k}_{m}"));
        g.throughput(Throughput::Bytes((k * SHARD) as u64));
        g.sample_size(10);
        g.bench_function(BenchmarkId::new("encode", "simd"), |b| {
            b.iter(|| simd_encode(k, m, &data))
        });
        g.bench_function(BenchmarkId::new("encode", "erasure"), |b| {
            b.iter(|| rse_encode(&rs, k, m, &data))
        });
        g.bench_function(BenchmarkId::new("decode", "simd"), |b| {
            b.iter(|| simd_decode(k, m, &data, &parity))
        });
        g.bench_function(BenchmarkId::new("decode", "erasure"), |b| {
            b.iter(|| rse_decode(&rs, &data, &rse_parity))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
