//! A Qwen2.5-VL-style request, preprocessed in Rust the way a gateway in front of an
//! engine does it: synthetic images cut into 14 x 14 patches of 2 frames and 3 channels,
//! normalised, cast to bfloat16, laid out in one batch buffer; the grid (t, h, w) of each
//! image; one `MultiModalFeatureSpec` per image with its placeholder range in the prompt.
//!
//! Items are built from the batch as engines build them (`flat_from_sizes` for the
//! patches, `batched` for the grids), so every element is a view of the batch buffer and
//! the encoded frames point into it. `mmcodec.demo.rust_gateway` rebuilds the same request
//! in Python, from the same formula, and checks every value (and every byte) it receives.
#![forbid(unsafe_code)]

use std::sync::Arc;

use mmcodec::{Dtype, IndexMap, NestedTensors, ShapeError, Tensor};
use mmcodec_multimodal::{
    BuildError, MultiModalFeatureSpec, MultiModalFieldConfig, MultiModalKwargsItems,
    PlaceholderRange,
};

/// Patch side in pixels, frames per patch (Qwen2.5-VL's temporal patch), channels.
pub const PATCH: usize = 14;
pub const FRAMES: usize = 2;
pub const CHANNELS: usize = 3;
/// Values per patch: 2 x 3 x 14 x 14.
pub const PATCH_DIM: usize = FRAMES * CHANNELS * PATCH * PATCH;
/// (h, w) in patches of image i % 8: `mmcodec.payloads.QWEN_GRIDS`.
pub const GRIDS: [(usize, usize); 8] = [
    (72, 72),
    (64, 80),
    (56, 56),
    (48, 64),
    (80, 60),
    (40, 52),
    (68, 76),
    (60, 60),
];
/// CLIP's normalisation, which Qwen2.5-VL's processor uses.
pub const MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub const STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];
/// Tokens before the first image, and between two images (end and start markers).
pub const PROMPT_PREFIX: u64 = 15;
pub const BETWEEN_IMAGES: u64 = 2;

/// The 8-bit value of a synthetic image's pixel.
pub fn pixel(seed: u64, image: usize, frame: usize, channel: usize, y: usize, x: usize) -> u8 {
    let v = (y as u64) * 7 + (x as u64) * 13 + (channel as u64) * 31 + (frame as u64) * 17;
    ((v + image as u64 * 5 + seed) % 256) as u8
}

/// An f32 rounded to bfloat16 (to nearest, ties to even), as torch casts it.
pub fn bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    let rounding = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(rounding) >> 16) as u16
}

/// The batch a processor hands over: every image's patches in one bf16 buffer, and the
/// grids, each buffer owned here (the request's tensors view them).
pub struct Batch {
    pub grids: Vec<(usize, usize)>,
    pub pixel_values: Vec<u8>,
    pub grid_thw: Vec<u8>,
    pub seed: u64,
}

impl Batch {
    /// Preprocess `images` synthetic images.
    pub fn preprocess(images: usize, seed: u64) -> Batch {
        let grids: Vec<(usize, usize)> = (0..images).map(|i| GRIDS[i % GRIDS.len()]).collect();
        let patches: usize = grids.iter().map(|(h, w)| h * w).sum();
        let mut pixel_values = Vec::with_capacity(patches * PATCH_DIM * 2);
        for (image, &(h, w)) in grids.iter().enumerate() {
            for row in 0..h {
                for col in 0..w {
                    for channel in 0..CHANNELS {
                        for frame in 0..FRAMES {
                            for y in 0..PATCH {
                                for x in 0..PATCH {
                                    let v = pixel(
                                        seed,
                                        image,
                                        frame,
                                        channel,
                                        row * PATCH + y,
                                        col * PATCH + x,
                                    );
                                    let normalised =
                                        (f32::from(v) / 255.0 - MEAN[channel]) / STD[channel];
                                    pixel_values.extend_from_slice(&bf16(normalised).to_le_bytes());
                                }
                            }
                        }
                    }
                }
            }
        }
        let grid_thw = grids
            .iter()
            .flat_map(|&(h, w)| [1i64, h as i64, w as i64])
            .flat_map(i64::to_le_bytes)
            .collect();
        Batch {
            grids,
            pixel_values,
            grid_thw,
            seed,
        }
    }

    /// The request: one feature spec per image, each holding its item (views of this
    /// batch) and its placeholder range.
    pub fn request(&self) -> Result<Vec<MultiModalFeatureSpec<'_>>, RequestError> {
        let sizes: Vec<u64> = self.grids.iter().map(|&(h, w)| (h * w) as u64).collect();
        let patches: u64 = sizes.iter().sum();
        let mut batch = IndexMap::new();
        let pixels = Tensor::new(
            Dtype::Bfloat16,
            &[patches, PATCH_DIM as u64],
            &self.pixel_values,
        )?;
        batch.insert("pixel_values".to_string(), NestedTensors::Tensor(pixels));
        let grids = Tensor::new(Dtype::Int64, &[self.grids.len() as u64, 3], &self.grid_thw)?;
        batch.insert("image_grid_thw".to_string(), NestedTensors::Tensor(grids));
        let mut config = IndexMap::new();
        config.insert(
            "pixel_values".to_string(),
            MultiModalFieldConfig::flat_from_sizes("image", &sizes, 0),
        );
        config.insert(
            "image_grid_thw".to_string(),
            MultiModalFieldConfig::batched("image"),
        );
        let mut items = MultiModalKwargsItems::from_hf_inputs(&batch, &config)?;
        let images = items.swap_remove("image").unwrap_or_default();
        let mut offset = PROMPT_PREFIX;
        let mut specs = Vec::with_capacity(images.len());
        for (index, (item, &(h, w))) in images.into_iter().zip(&self.grids).enumerate() {
            let length = (h * w / 4) as u64; // 2 x 2 patches merge into one token
            let identifier = format!("qwen-{}-{index}", self.seed);
            specs.push(MultiModalFeatureSpec {
                data: item,
                modality: "image".to_string(),
                identifier: identifier.clone(),
                mm_position: Arc::new(PlaceholderRange {
                    offset,
                    length,
                    is_embed: None,
                }),
                mm_hash: Some(identifier),
            });
            offset += length + BETWEEN_IMAGES;
        }
        Ok(specs)
    }
}

/// Why a request could not be built.
#[derive(Debug)]
pub enum RequestError {
    Shape(ShapeError),
    Build(BuildError),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::Shape(e) => write!(f, "{e}"),
            RequestError::Build(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RequestError {}

impl From<ShapeError> for RequestError {
    fn from(e: ShapeError) -> Self {
        RequestError::Shape(e)
    }
}

impl From<BuildError> for RequestError {
    fn from(e: BuildError) -> Self {
        RequestError::Build(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(1.0), 0x3f80);
        assert_eq!(bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // a tie, to even
        assert_eq!(bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(bf16(-2.0), 0xc000);
    }

    /// The 16-image request (151 MB of patches) as one buffer, decoded: every tensor is a
    /// slice of the buffer, at the offset of its payload frame (checked by address).
    #[test]
    fn decoding_the_151_mb_request_copies_no_tensor_byte() {
        let batch = Batch::preprocess(16, 0);
        assert_eq!(batch.pixel_values.len(), 64_320 * PATCH_DIM * 2); // 151,272,640 bytes
        let request = batch.request().unwrap();
        let mut items = MultiModalKwargsItems::default();
        items.insert(
            "image".to_string(),
            request.into_iter().map(|spec| spec.data).collect(),
        );
        let buffer = mmcodec::encode_bytes(&items).unwrap();
        let frames = mmcodec::framing::split(&buffer, &mmcodec::Limits::DEFAULT).unwrap();
        let decoded: MultiModalKwargsItems = mmcodec::decode_bytes(&buffer).unwrap();
        let (start, end) = (
            buffer.as_ptr() as usize,
            buffer.as_ptr() as usize + buffer.len(),
        );
        let pixel_frame = frames[1].as_ptr() as usize;
        let mut expected_offset = 0;
        for item in decoded["image"].iter().flatten() {
            let Some(NestedTensors::Tensor(pixels)) = &item["pixel_values"].data else {
                panic!("pixel values are a tensor")
            };
            let address = pixels.data().as_ptr() as usize;
            assert!(start <= address && address + pixels.nbytes() <= end);
            // Back to back in the one pixel frame, as the batch laid them out.
            assert_eq!(address, pixel_frame + expected_offset);
            expected_offset += pixels.nbytes();
        }
        assert_eq!(expected_offset, batch.pixel_values.len());
        assert_eq!(decoded, items);
    }

    #[test]
    fn the_request_views_the_batch_and_encodes_without_copying_it() {
        let batch = Batch::preprocess(2, 0);
        let request = batch.request().unwrap();
        assert_eq!(request.len(), 2);
        assert_eq!(
            request[1].mm_position.offset,
            PROMPT_PREFIX + 72 * 72 / 4 + BETWEEN_IMAGES
        );
        let frames = mmcodec::encode(&request[0]).unwrap();
        // The pixel frame is a slice of the batch buffer: the same address, not a copy.
        let start = batch.pixel_values.as_ptr() as usize;
        assert!(frames
            .payloads()
            .iter()
            .any(|f| f.as_ptr() as usize == start));
        let back: MultiModalFeatureSpec = mmcodec::decode(&frames.slices()).unwrap();
        assert_eq!(back, request[0]);
    }
}
