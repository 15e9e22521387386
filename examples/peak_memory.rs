//! Peak memory of a 64 MiB fan-in read: the client's growth in resident memory should be
//! close to the block size, not a multiple of it.
//!
//! Run: `cargo run --release --example peak_memory`
//!
//! 16 in-process servers hold 4 MiB each (64 MiB of objects, allocated before measuring).
//! Before each read the peak-RSS counter is reset (`/proc/self/clear_refs`, value 5), so the
//! reported peak is the high-water mark of that read alone; the growth is that peak minus the
//! resident size just before the read. Linux only.

use incast::rpc::{serve, Client, MemStore, ServerConfig};
use incast::{Policy, ServerId, Stripe};

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let line = s.lines().find(|l| l.starts_with(field)).expect("field");
    line.split_whitespace().nth(1).expect("value").parse().expect("number")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let servers: Vec<ServerId> = (0..16).map(ServerId).collect();
    let stripe = Stripe::fixed_block("block", &servers, 64 << 20)?;
    let mut addrs = Vec::new();
    for (i, f) in stripe.fragments().iter().enumerate() {
        let store = MemStore::new();
        store.insert(f.key(), vec![i as u8 + 1; f.len() as usize]);
        addrs.push((
            f.server(),
            serve("127.0.0.1:0".parse()?, store, ServerConfig::default())
                .await?
                .local_addr(),
        ));
    }
    let client = Client::new(addrs);
    let block_mib = stripe.block_len() as f64 / (1 << 20) as f64;
    println!("block {block_mib:.0} MiB over 16 servers");
    for (name, policy) in [("default", Policy::default()), ("naive", Policy::naive())] {
        for round in 0..3 {
            std::fs::write("/proc/self/clear_refs", "5")?;
            let before = status_kib("VmRSS:");
            let out = client.fan_in_read(&stripe, &policy).await?;
            let peak = status_kib("VmHWM:");
            assert!(out.block.iter().all(|&b| b != 0), "every byte delivered");
            let growth = (peak - before) as f64 / 1024.0;
            println!(
                "{name:<8} round {round}: peak growth {growth:6.1} MiB = {:.2} x the block ({:?})",
                growth / block_mib,
                out.report.elapsed
            );
            drop(out);
        }
    }
    Ok(())
}
