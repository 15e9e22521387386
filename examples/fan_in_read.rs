//! Start 16 fragment servers in this process and read a 4 MiB block striped over them.
//!
//! Run: `cargo run --release --example fan_in_read`
use incast::rpc::{serve, Client, MemStore, ServerConfig};
use incast::{Policy, ServerId, Stripe};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let servers: Vec<ServerId> = (0..16).map(ServerId).collect();
    let stripe = Stripe::fixed_block("block-0", &servers, 4 << 20)?;
    let mut addrs = Vec::new();
    for (i, f) in stripe.fragments().iter().enumerate() {
        let store = MemStore::new();
        store.insert(f.key(), vec![i as u8; f.len() as usize]);
        let server = serve("127.0.0.1:0".parse()?, store, ServerConfig::default()).await?;
        addrs.push((f.server(), server.local_addr()));
    }
    let client = Client::new(addrs);
    for _ in 0..3 {
        let out = client.fan_in_read(&stripe, &Policy::default()).await?;
        let r = &out.report;
        let mbps = out.block.len() as f64 * 8.0 / r.elapsed.as_secs_f64() / 1e6;
        println!(
            "{} bytes in {:?} ({mbps:.0} Mbit/s): {} grants, {} hedges, {} kernel RTOs, {} new connections",
            out.block.len(),
            r.elapsed,
            r.stats.grants,
            r.stats.hedges,
            r.kernel_rtos,
            r.connects
        );
        assert!(stripe
            .fragments()
            .iter()
            .enumerate()
            .all(|(i, _)| out.block[stripe.block_range(i).start as usize] == i as u8));
    }
    Ok(())
}
