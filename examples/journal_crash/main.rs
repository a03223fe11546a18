//! Crash stress for the journal: kills a child process running a journaled store with
//! SIGKILL at random moments, `--cycles N` times (default 1,000), and checks after every
//! restart that each acknowledged operation survived in its acknowledged state, that nothing
//! unacknowledged is half-applied, and that no id repeats.
//!
//! `cargo run --release --example journal_crash -- --cycles 1000 [--seed S] [--dir DIR]`

mod harness;

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        let dir = PathBuf::from(&args[1]);
        let seed = args[2].parse().expect("seed");
        harness::child(&dir, seed);
    }
    let mut cycles = 1000u64;
    let mut seed = std::process::id() as u64;
    let mut dir = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--cycles" => cycles = it.next().and_then(|v| v.parse().ok()).expect("--cycles N"),
            "--seed" => seed = it.next().and_then(|v| v.parse().ok()).expect("--seed S"),
            "--dir" => dir = it.next().map(PathBuf::from),
            other => panic!("unknown argument {other}"),
        }
    }
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = dir.unwrap_or_else(|| temp.path().to_path_buf());
    let exe = std::env::current_exe().expect("own path");
    let mut model = harness::Model::default();
    let mut rng = harness::Rng::new(seed);
    for cycle in 0..cycles {
        let child = Command::new(&exe)
            .args([
                "child",
                dir.to_str().expect("utf-8 path"),
                &(seed + cycle).to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let kill_after = 1 + rng.below(200);
        let outcome = harness::drive(&mut model, child, kill_after)
            .and_then(|in_flight| harness::verify(&mut model, &dir, in_flight));
        if let Err(e) = outcome {
            eprintln!("cycle {cycle} (seed {seed}): {e}");
            std::process::exit(1);
        }
        if (cycle + 1) % 100 == 0 {
            println!(
                "{} cycles, {} acknowledged operations checked",
                cycle + 1,
                model.acks
            );
        }
    }
    println!(
        "journal_crash: {cycles} cycles passed, {} acknowledged operations checked, {} in-flight operations found applied, seed {seed}",
        model.acks, model.recovered_in_flight
    );
}
