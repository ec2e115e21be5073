//! mmcodec's shipped schema, `schema/multimodal.yaml`, in Rust: the types `mmcodec
//! generate --lang rust` writes (in [`generated`], re-exported here), and
//! [`MultiModalFieldConfig`] and [`MultiModalKwargsItems::from_hf_inputs`] to build
//! items from a processor's batch as engines do.
//!
//! ```
//! use std::sync::Arc;
//!
//! use mmcodec::{Dtype, IndexMap, NestedTensors, Tensor};
//! use mmcodec_multimodal::{MultiModalFieldConfig, MultiModalKwargsItems};
//!
//! // Two images' patches in one bf16 buffer (3 and 1 patches of 4 values), and grids.
//! let pixels = vec![0u8; 4 * 4 * 2];
//! let grids: Vec<u8> = [1i64, 1, 3, 1, 1, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
//! let mut batch = IndexMap::new();
//! batch.insert("pixel_values".to_string(), Tensor::new(Dtype::Bfloat16, &[4, 4], &pixels)?.into());
//! batch.insert("image_grid_thw".to_string(), Tensor::new(Dtype::Int64, &[2, 3], &grids)?.into());
//! let mut config = IndexMap::new();
//! config.insert("pixel_values".to_string(), MultiModalFieldConfig::flat_from_sizes("image", &[3, 1], 0));
//! config.insert("image_grid_thw".to_string(), MultiModalFieldConfig::batched("image"));
//! let items = MultiModalKwargsItems::from_hf_inputs(&batch, &config)?;
//!
//! let frames = mmcodec::encode(&items)?; // payload frames view `pixels`: nothing copied
//! let back: MultiModalKwargsItems = mmcodec::decode(&frames.slices())?;
//! assert_eq!(back, items);
//! let first = back["image"][0].as_ref().unwrap();
//! assert!(matches!(&first["pixel_values"].data, Some(NestedTensors::Tensor(t)) if t.shape() == [3, 4]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

pub mod config;
pub mod generated;

pub use config::{BuildError, MultiModalFieldConfig};
pub use generated::multimodal::*;

/// The guide, `docs/rust.md`: its Rust examples run as this crate's doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rust.md")]
pub struct Guide;
