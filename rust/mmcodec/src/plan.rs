//! The encoder's payload planner: the tensors a body references, laid out as runs and
//! frames exactly as the Python runtime lays them out, so that both write the same bytes.
//!
//! Views of one storage with the same dtype and shape that sit back to back become one run;
//! each contiguous byte range of a storage becomes one frame, a slice of the caller's
//! memory (no copy); ranges under the inline threshold travel inside the header instead.
//! When no two tensors' bytes touch, each is its own run and frame, in reference order.

use std::collections::HashMap;
use std::sync::Arc;

use crate::dtype::Dtype;
use crate::tensor::Tensor;

/// Payloads (per storage region) below this many bytes travel inside the header: the
/// Python runtime's threshold, chosen there by measurement.
pub const DEFAULT_INLINE_THRESHOLD: usize = 1024;

/// Where a run's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunData<'a> {
    /// Payload frame `index` (frame 0 is the header).
    Frame(usize),
    /// Inside the header.
    Inline(&'a [u8]),
}

/// One run of the envelope: `count` tensors of one dtype and shape, back to back.
#[derive(Clone, Debug)]
pub struct Run<'a> {
    pub dtype: Dtype,
    pub shape: Arc<[u64]>,
    pub data: RunData<'a>,
    pub offset: usize,
    pub count: usize,
}

/// The planner's result: the runs, the reference table (empty when tensor references are
/// positions among the runs' tensors) and the payload frames.
pub struct Plan<'a> {
    pub runs: Vec<Run<'a>>,
    pub refs: Vec<usize>,
    pub frames: Vec<&'a [u8]>,
}

/// A tensor as the planner sees it.
struct Placed {
    address: usize,
    nbytes: usize,
}

/// Lay `tensors` (in reference order) out as runs and frames.
pub fn plan<'a>(tensors: &[Tensor<'a>], inline_threshold: usize) -> Plan<'a> {
    let placed: Vec<Placed> = tensors
        .iter()
        .map(|t| Placed {
            address: t.data().as_ptr() as usize,
            nbytes: t.nbytes(),
        })
        .collect();
    if apart(&placed) {
        return one_run_per_tensor(tensors, inline_threshold);
    }
    general(tensors, inline_threshold)
}

/// Whether no two tensors' bytes overlap or touch (nor sit at one address, as empty
/// tensors can): then nothing can be merged or sent once.
fn apart(placed: &[Placed]) -> bool {
    if placed.len() == 1 {
        return true;
    }
    let mut ordered: Vec<&Placed> = placed.iter().collect();
    ordered.sort_by_key(|p| p.address);
    let mut end: Option<usize> = None;
    for p in ordered {
        if end.is_some_and(|end| p.address <= end) || p.nbytes == 0 {
            return false;
        }
        end = Some(p.address + p.nbytes);
    }
    true
}

fn one_run_per_tensor<'a>(tensors: &[Tensor<'a>], inline_threshold: usize) -> Plan<'a> {
    let mut runs = Vec::with_capacity(tensors.len());
    let mut frames = Vec::new();
    for t in tensors {
        let data = if t.nbytes() < inline_threshold {
            RunData::Inline(t.data())
        } else {
            frames.push(t.data());
            RunData::Frame(frames.len())
        };
        runs.push(Run {
            dtype: t.dtype(),
            shape: t.shape().into(),
            data,
            offset: 0,
            count: 1,
        });
    }
    Plan {
        runs,
        refs: Vec::new(),
        frames,
    }
}

/// A run being built: back-to-back tensors of one storage, dtype and shape.
struct Building<'a> {
    group: usize,
    dtype: Dtype,
    shape: Arc<[u64]>,
    /// Bytes of one tensor.
    nbytes: usize,
    /// Offsets in the storage: where the run starts and where its bytes end.
    start: usize,
    end: usize,
    members: Vec<usize>,
    data: RunData<'a>,
    offset: usize,
}

/// The tensors of one storage and dtype.
struct Group<'a> {
    /// The longest of the members' storages: all start at the same address, so it holds
    /// every member's bytes.
    storage: &'a [u8],
    /// (offset in the storage, reference) per member.
    members: Vec<(usize, usize)>,
}

fn general<'a>(tensors: &[Tensor<'a>], inline_threshold: usize) -> Plan<'a> {
    // Group by (storage address, dtype), in order of first reference.
    let mut groups: Vec<Group<'a>> = Vec::new();
    let mut group_of: HashMap<(usize, Dtype), usize> = HashMap::new();
    for (reference, t) in tensors.iter().enumerate() {
        let base = t.storage().as_ptr() as usize;
        let index = *group_of.entry((base, t.dtype())).or_insert_with(|| {
            groups.push(Group {
                storage: t.storage(),
                members: Vec::new(),
            });
            groups.len() - 1
        });
        let group = &mut groups[index];
        if t.storage().len() > group.storage.len() {
            group.storage = t.storage();
        }
        group.members.push((t.offset(), reference));
    }

    // Split each group into runs of back-to-back tensors; equal placement is one tensor.
    let mut runs: Vec<Building<'a>> = Vec::new();
    let mut alias: Vec<(usize, usize)> = Vec::new(); // (reference, reference it repeats)
    for (index, group) in groups.iter_mut().enumerate() {
        group.members.sort_unstable();
        let mut members = group.members.iter();
        let Some(&(start, first)) = members.next() else {
            continue;
        };
        let mut run = building(index, &tensors[first], first, start);
        let (mut last_start, mut last_ref) = (start, first);
        for &(start, reference) in members {
            let shape = tensors[reference].shape();
            if start == last_start + run.nbytes && *shape == *run.shape && run.nbytes > 0 {
                run.members.push(reference); // the next tensor of a batch: the common case
                run.end += run.nbytes;
            } else if start == last_start && *shape == *run.shape {
                alias.push((reference, last_ref)); // the same bytes and layout (or both empty)
                continue;
            } else {
                runs.push(run);
                run = building(index, &tensors[reference], reference, start);
            }
            (last_start, last_ref) = (start, reference);
        }
        runs.push(run);
    }

    // Number tensors in run order, so that the decoder can make them run by run.
    let mut position_of = vec![0usize; tensors.len()];
    let mut position = 0;
    let mut identity = alias.is_empty();
    for run in &runs {
        for &reference in &run.members {
            position_of[reference] = position;
            identity = identity && reference == position;
            position += 1;
        }
    }
    for &(reference, same) in &alias {
        position_of[reference] = position_of[same];
    }

    // One frame per contiguous byte range of a storage; small ranges go inline.
    let mut frames: Vec<&'a [u8]> = Vec::new();
    let mut storage_order: Vec<usize> = Vec::new(); // groups' storages, in run order
    let mut runs_of: HashMap<usize, Vec<usize>> = HashMap::new(); // storage -> run indices
    for (index, run) in runs.iter().enumerate() {
        let base = groups[run.group].storage.as_ptr() as usize;
        runs_of.entry(base).or_insert_with(|| {
            storage_order.push(base);
            Vec::new()
        });
        if let Some(list) = runs_of.get_mut(&base) {
            list.push(index);
        }
    }
    for base in storage_order {
        let mut members = runs_of.remove(&base).unwrap_or_default();
        members.sort_by_key(|&index| runs[index].start); // stable: ties keep run order
        let storage = longest_storage(&groups, &runs, &members);
        let mut region: Vec<usize> = Vec::new();
        let mut end = 0;
        for index in members {
            if !region.is_empty() && runs[index].start <= end {
                end = end.max(runs[index].end); // overlapping or touching: one region
                region.push(index);
            } else {
                place_region(&region, &mut runs, storage, inline_threshold, &mut frames);
                end = runs[index].end;
                region = vec![index];
            }
        }
        place_region(&region, &mut runs, storage, inline_threshold, &mut frames);
    }

    let runs = runs
        .into_iter()
        .map(|run| Run {
            dtype: run.dtype,
            shape: run.shape,
            data: run.data,
            offset: run.offset,
            count: run.members.len(),
        })
        .collect();
    Plan {
        runs,
        refs: if identity { Vec::new() } else { position_of },
        frames,
    }
}

fn building<'a>(group: usize, first: &Tensor<'a>, reference: usize, start: usize) -> Building<'a> {
    let nbytes = first.nbytes();
    Building {
        group,
        dtype: first.dtype(),
        shape: first.shape().into(),
        nbytes,
        start,
        end: start + nbytes,
        members: vec![reference],
        data: RunData::Inline(&[]),
        offset: 0,
    }
}

/// Storages of one address may differ in length (groups of other dtypes): the longest.
fn longest_storage<'a>(groups: &[Group<'a>], runs: &[Building<'a>], members: &[usize]) -> &'a [u8] {
    let mut storage: &'a [u8] = &[];
    for &index in members {
        let candidate = groups[runs[index].group].storage;
        if candidate.len() > storage.len() {
            storage = candidate;
        }
    }
    storage
}

/// Make one storage region a frame (or inline it) and point its runs into it.
fn place_region<'a>(
    region: &[usize],
    runs: &mut [Building<'a>],
    storage: &'a [u8],
    inline_threshold: usize,
    frames: &mut Vec<&'a [u8]>,
) {
    let Some(&first) = region.first() else { return };
    let start = runs[first].start;
    let end = region.iter().map(|&i| runs[i].end).max().unwrap_or(start);
    if end == start {
        for &index in region {
            runs[index].data = RunData::Inline(&[]);
            runs[index].offset = 0;
        }
        return;
    }
    if end - start < inline_threshold {
        for &index in region {
            let run = &mut runs[index];
            run.data = RunData::Inline(&storage[run.start..run.end]);
        }
        return;
    }
    frames.push(&storage[start..end]);
    for &index in region {
        runs[index].data = RunData::Frame(frames.len());
        runs[index].offset = runs[index].start - start;
    }
}
