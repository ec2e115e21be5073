//! `mmcodec-gateway`: build a Qwen2.5-VL-style request in Rust and send it to an engine
//! over ZMQ, one message per image (each a `MultiModalFeatureSpec`, frames as
//! `mmcodec.transport.zmq` sends them: part i is frame i).
//!
//! ```text
//! mmcodec-gateway --connect ipc:///tmp/engine.sock [--images 16] [--seed 0]
//! ```
//!
//! The Python side (`python -m mmcodec.demo.rust_gateway`) binds a PULL socket, starts
//! this program, and decodes and verifies what arrives.

use std::error::Error;
use std::process::ExitCode;
use std::time::Instant;

use mmcodec_gateway::Batch;

struct Options {
    connect: String,
    images: usize,
    seed: u64,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        connect: String::new(),
        images: 16,
        seed: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--connect" => options.connect = value,
            "--images" => options.images = value.parse().map_err(|e| format!("--images: {e}"))?,
            "--seed" => options.seed = value.parse().map_err(|e| format!("--seed: {e}"))?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.connect.is_empty() {
        return Err("usage: mmcodec-gateway --connect ENDPOINT [--images N] [--seed S]".into());
    }
    Ok(options)
}

fn run(options: &Options) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let batch = Batch::preprocess(options.images, options.seed);
    let preprocessed = started.elapsed();
    let request = batch.request()?;
    let context = zmq::Context::new();
    let socket = context.socket(zmq::PUSH)?;
    socket.connect(&options.connect)?;
    let (mut encoding, mut bytes) = (std::time::Duration::ZERO, 0usize);
    for spec in &request {
        let before = Instant::now();
        let frames = mmcodec::encode(spec)?; // views of the batch: no tensor byte copied
        encoding += before.elapsed();
        bytes += frames.slices().iter().map(|f| f.len()).sum::<usize>();
        // The zmq crate's safe API copies each part into a message of its own.
        socket.send_multipart(frames.slices(), 0)?;
    }
    eprintln!(
        "mmcodec-gateway: {} images, {:.1} MB of bf16 patches preprocessed in {:.2} s, \
         encoded in {:.1} us, sent as {} messages",
        options.images,
        bytes as f64 / 1e6,
        preprocessed.as_secs_f64(),
        encoding.as_secs_f64() * 1e6,
        request.len()
    );
    Ok(())
}

fn main() -> ExitCode {
    match options().map_err(Into::into).and_then(|o| run(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mmcodec-gateway: {error}");
            ExitCode::FAILURE
        }
    }
}
