//! TensorFlow data types and their sizes in bytes.

/// A TensorFlow `DataType` enum value (reference types, `+100`, are folded
/// onto their base type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DType(pub u8);

impl DType {
    pub const FLOAT: DType = DType(1);
    pub const DOUBLE: DType = DType(2);
    pub const INT32: DType = DType(3);
    pub const INT64: DType = DType(9);
    pub const BOOL: DType = DType(10);
    pub const BFLOAT16: DType = DType(14);
    pub const HALF: DType = DType(19);
    pub const RESOURCE: DType = DType(20);
    pub(crate) const VARIANT: DType = DType(21);

    /// Every type this table knows, by code (1..=32): what the Python
    /// package reads instead of keeping its own codes.
    pub fn all() -> impl Iterator<Item = DType> {
        (1..=32u8).map(DType)
    }

    /// Folds a raw protobuf enum value (which may be a `_REF` type) into a dtype.
    /// Unknown values give `None`.
    pub(crate) fn from_proto(v: i64) -> Option<DType> {
        let v = if (101..=132).contains(&v) { v - 100 } else { v };
        if (1..=32).contains(&v) {
            Some(DType(v as u8))
        } else {
            None
        }
    }

    /// Bytes per element on the device timeline.
    ///
    /// Resources and variants are handles whose memory is not owned by the
    /// tensor: they cost 0. A `tstring` element is costed at its 24-byte
    /// header (the character data is host-side in practice). 4- and 2-bit
    /// integers are stored one per byte by TensorFlow.
    pub fn size(self) -> u64 {
        match self.0 {
            1 => 4,       // float
            2 => 8,       // double
            3 => 4,       // int32
            4 => 1,       // uint8
            5 => 2,       // int16
            6 => 1,       // int8
            7 => 24,      // string (tstring header)
            8 => 8,       // complex64
            9 => 8,       // int64
            10 => 1,      // bool
            11 | 12 => 1, // qint8, quint8
            13 => 4,      // qint32
            14 => 2,      // bfloat16
            15 | 16 => 2, // qint16, quint16
            17 => 2,      // uint16
            18 => 16,     // complex128
            19 => 2,      // half
            20 | 21 => 0, // resource, variant
            22 => 4,      // uint32
            23 => 8,      // uint64
            24..=28 => 1, // float8 variants
            29..=32 => 1, // int4, uint4, int2, uint2 (one per byte)
            _ => 0,
        }
    }

    /// True for handle types (resource, variant) that own no device bytes.
    pub fn is_handle(self) -> bool {
        self == DType::RESOURCE || self == DType::VARIANT
    }

    /// The TensorFlow name of the type, e.g. `float32`.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 33] = [
            "invalid",
            "float32",
            "float64",
            "int32",
            "uint8",
            "int16",
            "int8",
            "string",
            "complex64",
            "int64",
            "bool",
            "qint8",
            "quint8",
            "qint32",
            "bfloat16",
            "qint16",
            "quint16",
            "uint16",
            "complex128",
            "float16",
            "resource",
            "variant",
            "uint32",
            "uint64",
            "float8_e5m2",
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e4m3b11fnuz",
            "float8_e5m2fnuz",
            "int4",
            "uint4",
            "int2",
            "uint2",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("invalid")
    }

    /// True for floating-point types (used by the cost model).
    pub(crate) fn is_float(self) -> bool {
        matches!(self.0, 1 | 2 | 14 | 19 | 24..=28)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_common_types() {
        assert_eq!(DType::FLOAT.size(), 4);
        assert_eq!(DType::BFLOAT16.size(), 2);
        assert_eq!(DType::HALF.size(), 2);
        assert_eq!(DType::DOUBLE.size(), 8);
        assert_eq!(DType::BOOL.size(), 1);
        assert_eq!(DType(8).size(), 8); // complex64
        assert_eq!(DType(18).size(), 16); // complex128
        assert_eq!(DType(6).size(), 1); // int8
        assert_eq!(DType::INT64.size(), 8);
        assert_eq!(DType::RESOURCE.size(), 0);
        assert_eq!(DType::VARIANT.size(), 0);
    }

    #[test]
    fn ref_types_fold_and_unknown_reject() {
        assert_eq!(DType::from_proto(101), Some(DType::FLOAT));
        assert_eq!(DType::from_proto(0), None);
        assert_eq!(DType::from_proto(77), None);
        assert_eq!(DType::from_proto(-3), None);
    }
}
