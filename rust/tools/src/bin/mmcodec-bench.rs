//! The Rust rows of `make bench`: decode and encode of a message the Python side encoded.
//!
//! ```text
//! mmcodec-bench FILE [--seconds S] [--min-reps N] [--max-reps N]
//! ```
//!
//! FILE holds a `MultiModalKwargsItems` message as one buffer (what `encode_bytes` writes).
//! Each operation is timed call by call (after two warm-up calls) until `--seconds` have
//! passed and at least `--min-reps` samples were taken (at most `--max-reps`):
//!
//! * `decode`: frames (slices of the buffer) to the value, every tensor a view;
//! * `encode`: the decoded value to frames (payload frames are slices of its tensors);
//! * `encode_bytes`: the decoded value to one buffer (one copy of every payload).
//!
//! Prints one JSON object: the samples of each, in seconds, and how many tensor bytes the
//! decoded value holds outside the input buffer (0: nothing was copied).

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use mmcodec::{framing, Limits, NestedTensors, Tensor};
use mmcodec_multimodal::MultiModalKwargsItems;

struct Budget {
    seconds: f64,
    min_reps: usize,
    max_reps: usize,
}

fn measure(budget: &Budget, mut f: impl FnMut()) -> Vec<f64> {
    f();
    f();
    let mut samples = Vec::new();
    let started = Instant::now();
    while samples.len() < budget.max_reps {
        let t0 = Instant::now();
        f();
        samples.push(t0.elapsed().as_secs_f64());
        if samples.len() >= budget.min_reps && started.elapsed().as_secs_f64() >= budget.seconds {
            break;
        }
    }
    samples
}

/// Tensor bytes of `value` that do not lie in `buffer`.
fn copied(value: &MultiModalKwargsItems<'_>, buffer: &[u8]) -> usize {
    fn outside(t: &Tensor<'_>, buffer: &[u8]) -> usize {
        let start = buffer.as_ptr() as usize;
        let at = t.data().as_ptr() as usize;
        if t.nbytes() == 0 || (at >= start && at + t.nbytes() <= start + buffer.len()) {
            0
        } else {
            t.nbytes()
        }
    }
    fn nested(n: &NestedTensors<'_>, buffer: &[u8]) -> usize {
        match n {
            NestedTensors::Tensor(t) => outside(t, buffer),
            NestedTensors::List(items) | NestedTensors::Tuple(items) => {
                items.iter().map(|i| nested(i, buffer)).sum()
            }
            _ => 0,
        }
    }
    value
        .values()
        .flatten()
        .flatten()
        .flat_map(|item| item.values())
        .filter_map(|elem| elem.data.as_ref())
        .map(|data| nested(data, buffer))
        .sum()
}

fn list(samples: &[f64]) -> String {
    let parts: Vec<String> = samples.iter().map(|s| format!("{s:e}")).collect();
    format!("[{}]", parts.join(","))
}

fn run(args: &[String]) -> Result<(), String> {
    let (file, rest) = args
        .split_first()
        .ok_or("usage: mmcodec-bench FILE [--seconds S]")?;
    let mut budget = Budget {
        seconds: 1.0,
        min_reps: 5,
        max_reps: 100_000,
    };
    for pair in rest.chunks(2) {
        let value = pair.get(1).ok_or("an option needs a value")?;
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{v}: {e}"));
        match pair[0].as_str() {
            "--seconds" => budget.seconds = number(value)?,
            "--min-reps" => budget.min_reps = number(value)? as usize,
            "--max-reps" => budget.max_reps = number(value)? as usize,
            other => return Err(format!("unknown option {other}")),
        }
    }
    let buffer = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
    let frames = framing::split(&buffer, &Limits::DEFAULT).map_err(|e| e.to_string())?;
    let value: MultiModalKwargsItems = mmcodec::decode(&frames).map_err(|e| e.to_string())?;
    let decode = measure(&budget, || {
        let decoded: MultiModalKwargsItems =
            mmcodec::decode(black_box(&frames)).expect("it decoded");
        black_box(decoded);
    });
    let encode = measure(&budget, || {
        black_box(mmcodec::encode(black_box(&value)).expect("it encodes"));
    });
    let encode_bytes = measure(&budget, || {
        black_box(
            mmcodec::encode(black_box(&value))
                .expect("it encodes")
                .to_bytes(),
        );
    });
    println!(
        "{{\"decode\":{},\"encode\":{},\"encode_bytes\":{},\"copied\":{}}}",
        list(&decode),
        list(&encode),
        list(&encode_bytes),
        copied(&value, &buffer)
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mmcodec-bench: {message}");
            ExitCode::from(2)
        }
    }
}
