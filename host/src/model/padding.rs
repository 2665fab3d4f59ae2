//! Ragged batches: the tensors predict takes whose sizes differ from item to item (token
//! sequences), which the host pads to their sub-batch's largest instead of running each
//! length apart, and how much of a padded sub-batch may be padding.
//!
//! A model declares them in `model.toml` (`[batching.pad]`, `batching.max_padding`); the
//! pipeline's predict stage pads ([`crate::model::tensor::Tensor::stack_padded`]) and
//! splits a group of items into length buckets so that no sub-batch passes the bound.

use super::tensor::{DataType, Tensor};

/// At most this share of a padded sub-batch's elements are padding, unless the model says
/// otherwise: on a 2-core machine one more predict call of a BERT-sized graph costs far
/// less than a quarter of a batch computed for nothing.
pub const DEFAULT_MAX_PADDING: f64 = 0.25;

/// Which of predict's inputs are ragged, each with its pad value.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Padding {
    /// The ragged tensors by name, with the value their padding holds.
    pub pads: Vec<(String, PadValue)>,
    /// Most of a sub-batch's ragged elements that may be padding, in `0.0..=1.0`.
    pub max_padding: f64,
}

/// The value a ragged tensor is padded with, as `model.toml` gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadValue {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Padding {
    /// The pad value of tensor `name`, if it is ragged.
    pub fn pad_value(&self, name: &str) -> Option<PadValue> {
        self.pads.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    pub fn is_empty(&self) -> bool {
        self.pads.is_empty()
    }

    /// Whether `tensor` is ragged here.
    pub fn is_ragged(&self, tensor: &Tensor) -> bool {
        self.pads.iter().any(|(n, _)| *n == tensor.name)
    }

    /// Parses `[batching.pad]` (`name = value`) and `batching.max_padding`.
    pub fn parse(
        pads: impl IntoIterator<Item = (String, toml::Value)>,
        max_padding: Option<f64>,
    ) -> Result<Self, String> {
        let pads = pads
            .into_iter()
            .map(|(name, value)| {
                let value = match value {
                    toml::Value::Integer(i) => PadValue::Int(i),
                    toml::Value::Float(f) if f.is_finite() => PadValue::Float(f),
                    toml::Value::Boolean(b) => PadValue::Bool(b),
                    other => {
                        return Err(format!(
                            "key `batching.pad.{name}`: {other} is not a pad value (an integer, a finite number or a boolean)"
                        ))
                    }
                };
                Ok((name, value))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let max_padding = max_padding.unwrap_or(DEFAULT_MAX_PADDING);
        if !(0.0..=1.0).contains(&max_padding) {
            return Err(format!(
                "key `batching.max_padding`: {max_padding} is outside 0.0..=1.0 (the share of a padded batch that may be padding)"
            ));
        }
        Ok(Padding { pads, max_padding })
    }
}

impl PadValue {
    /// The value as one element of `datatype`, little-endian; an error names why it does not
    /// fit (a pad of -1 for UINT8, 0.5 for INT64, anything for BYTES).
    pub fn element(self, datatype: DataType) -> Result<Vec<u8>, String> {
        let unfit = || format!("pad value {self} does not fit {datatype}");
        let int = || match self {
            PadValue::Int(i) => Ok(i),
            PadValue::Bool(b) => Ok(i64::from(b)),
            PadValue::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            PadValue::Float(_) => Err(unfit()),
        };
        let float = || match self {
            PadValue::Int(i) => i as f64,
            PadValue::Float(f) => f,
            PadValue::Bool(b) => f64::from(u8::from(b)),
        };
        macro_rules! integer {
            ($t:ty) => {
                <$t>::try_from(int()?)
                    .map_err(|_| unfit())?
                    .to_le_bytes()
                    .to_vec()
            };
        }
        Ok(match datatype {
            DataType::Bool => match int()? {
                0 | 1 => vec![int()? as u8],
                _ => return Err(unfit()),
            },
            DataType::Uint8 => integer!(u8),
            DataType::Uint16 => integer!(u16),
            DataType::Uint32 => integer!(u32),
            DataType::Uint64 => integer!(u64),
            DataType::Int8 => integer!(i8),
            DataType::Int16 => integer!(i16),
            DataType::Int32 => integer!(i32),
            DataType::Int64 => integer!(i64),
            DataType::Fp16 => half::f16::from_f64(float()).to_le_bytes().to_vec(),
            DataType::Fp32 => (float() as f32).to_le_bytes().to_vec(),
            DataType::Fp64 => float().to_le_bytes().to_vec(),
            DataType::Bytes => return Err(format!("{datatype} tensors cannot be padded")),
        })
    }
}

impl std::fmt::Display for PadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PadValue::Int(i) => write!(f, "{i}"),
            PadValue::Float(x) => write!(f, "{x}"),
            PadValue::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Splits items into buckets whose padding stays within `max_padding`: `shapes` holds each
/// item's ragged tensors' shapes; the items are sorted by size and a bucket is closed when
/// the next item would push its padding past the bound. Returns the buckets as lists of
/// positions into `shapes`, shortest first.
pub fn buckets(shapes: &[Vec<&[u64]>], max_padding: f64) -> Vec<Vec<usize>> {
    let size = |position: usize| -> u64 { shapes[position].iter().map(|s| count(s)).sum() };
    let mut order: Vec<usize> = (0..shapes.len()).collect();
    order.sort_by_key(|&p| size(p));
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    let mut current = Bucket::default();
    for position in order {
        if !current.members.is_empty() && current.waste_with(&shapes[position]) > max_padding {
            buckets.push(std::mem::take(&mut current).members);
        }
        current.add(position, &shapes[position]);
    }
    if !current.members.is_empty() {
        buckets.push(current.members);
    }
    buckets
}

/// A bucket being filled: its members, the largest shape of each ragged tensor so far, and
/// the elements its items really hold.
#[derive(Default)]
struct Bucket {
    members: Vec<usize>,
    largest: Vec<Vec<u64>>,
    real: u64,
}

impl Bucket {
    fn add(&mut self, position: usize, shapes: &[&[u64]]) {
        self.largest = self.grown(shapes);
        self.real += shapes.iter().map(|s| count(s)).sum::<u64>();
        self.members.push(position);
    }

    /// The largest shapes with `shapes` added.
    fn grown(&self, shapes: &[&[u64]]) -> Vec<Vec<u64>> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| match self.largest.get(i) {
                Some(largest) if largest.len() == shape.len() => {
                    largest.iter().zip(shape.iter()).map(|(&a, &b)| a.max(b)).collect()
                }
                _ => shape.to_vec(),
            })
            .collect()
    }

    /// The share of padding the bucket would have with an item of `shapes` added.
    fn waste_with(&self, shapes: &[&[u64]]) -> f64 {
        let rows = self.members.len() as u64 + 1;
        let padded: u64 = self.grown(shapes).iter().map(|s| count(s) * rows).sum();
        let real = self.real + shapes.iter().map(|s| count(s)).sum::<u64>();
        if padded == 0 {
            return 0.0;
        }
        padded.saturating_sub(real) as f64 / padded as f64
    }
}

fn count(shape: &[u64]) -> u64 {
    shape.iter().product()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pads: &[(&str, toml::Value)], max: Option<f64>) -> Result<Padding, String> {
        Padding::parse(pads.iter().map(|(n, v)| (n.to_string(), v.clone())), max)
    }

    #[test]
    fn pad_values_are_parsed_and_checked() {
        let p = parse(
            &[("ids", toml::Value::Integer(0)), ("x", toml::Value::Float(-1.5))],
            None,
        )
        .unwrap();
        assert_eq!(p.pad_value("ids"), Some(PadValue::Int(0)));
        assert_eq!(p.pad_value("x"), Some(PadValue::Float(-1.5)));
        assert_eq!(p.pad_value("y"), None);
        assert_eq!(p.max_padding, DEFAULT_MAX_PADDING);
        let err = parse(&[("s", toml::Value::String("a".into()))], None).unwrap_err();
        assert!(err.contains("batching.pad.s"), "{err}");
        for bad in [-0.1, 1.5, f64::NAN] {
            let err = parse(&[], Some(bad)).unwrap_err();
            assert!(err.contains("batching.max_padding"), "{err}");
        }
    }

    #[test]
    fn pad_values_become_elements_of_their_datatype_or_say_why_not() {
        assert_eq!(PadValue::Int(0).element(DataType::Int64).unwrap(), vec![0; 8]);
        assert_eq!(
            PadValue::Int(-1).element(DataType::Int32).unwrap(),
            (-1i32).to_le_bytes()
        );
        assert_eq!(PadValue::Float(2.0).element(DataType::Int8).unwrap(), vec![2]);
        assert_eq!(PadValue::Int(1).element(DataType::Fp32).unwrap(), 1f32.to_le_bytes());
        assert_eq!(PadValue::Bool(true).element(DataType::Bool).unwrap(), vec![1]);
        assert_eq!(PadValue::Float(1.0).element(DataType::Fp16).unwrap(), [0x00, 0x3c]);
        for (value, datatype) in [
            (PadValue::Int(-1), DataType::Uint8),
            (PadValue::Int(300), DataType::Int8),
            (PadValue::Float(0.5), DataType::Int64),
            (PadValue::Int(2), DataType::Bool),
            (PadValue::Int(0), DataType::Bytes),
        ] {
            let err = value.element(datatype).unwrap_err();
            assert!(err.contains(&datatype.to_string()), "{err}");
        }
    }

    /// Realistic token counts (a sentence corpus's, with [CLS] and [SEP]): the buckets hold
    /// every item once, none passes the bound, and the waste is far below one batch's.
    #[test]
    fn buckets_keep_every_item_and_bound_the_padding() {
        let lengths: Vec<u64> = vec![
            14, 9, 31, 22, 7, 48, 12, 19, 25, 11, 64, 17, 8, 36, 21, 15, 27, 10, 13, 42, 18, 24, 9, 33, 16, 20, 29, 12,
            55, 23, 14, 30,
        ];
        let shapes: Vec<Vec<u64>> = lengths.iter().map(|&l| vec![l]).collect();
        let items: Vec<Vec<&[u64]>> = shapes.iter().map(|s| vec![s.as_slice(), s.as_slice()]).collect();
        let waste = |bucket: &[usize]| {
            let longest = bucket.iter().map(|&p| lengths[p]).max().unwrap();
            let real: u64 = bucket.iter().map(|&p| lengths[p]).sum();
            (longest * bucket.len() as u64 - real) as f64 / (longest * bucket.len() as u64) as f64
        };
        let all: Vec<usize> = (0..lengths.len()).collect();
        assert!(waste(&all) > 0.5, "one batch of these is mostly padding");
        for bound in [0.0, 0.1, 0.25, 0.5] {
            let buckets = buckets(&items, bound);
            let mut seen: Vec<usize> = buckets.iter().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(seen, all, "every item exactly once");
            for bucket in &buckets {
                assert!(
                    waste(bucket) <= bound + 1e-9,
                    "{bound}: {bucket:?} wastes {}",
                    waste(bucket)
                );
            }
            if bound == 0.25 {
                assert!(buckets.len() <= 6, "{} buckets", buckets.len());
            }
        }
        assert_eq!(buckets(&items, 1.0).len(), 1);
    }
}
