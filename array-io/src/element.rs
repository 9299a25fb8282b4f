//! Element types: which Rust types array-io stores, the HDF5 type each one is stored as, and the
//! names used in error messages.
//!
//! The HDF5 types are the ones h5py and numpy use, so files travel both ways: integers and
//! floats as little-endian IEEE / two's-complement types, `bool` as an HDF5 enum over `int8`
//! (`FALSE = 0`, `TRUE = 1`), `f16` as IEEE binary16.

use crate::error::{Error, Result};
use hdf5::types::{IntSize, TypeDescriptor};

mod sealed {
    pub trait Sealed {}
}

/// A type array-io can store as an HDF5 element: every native integer, `f32`, `f64`, `bool`
/// and `half::f16`. `i128` and `u128` implement it only to be refused with a clear error at run
/// time (HDF5 has no predefined 128-bit integer type, and numpy and h5py cannot read one).
pub trait Element:
    cudarc::driver::DeviceRepr
    + cudarc::driver::ValidAsZeroBits
    + Copy
    + Send
    + Sync
    + 'static
    + sealed::Sealed
{
    /// The Rust name, for messages.
    const NAME: &'static str;

    /// Whether stored bytes can be invalid for this type (only `bool`: bytes other than 0 and 1).
    #[doc(hidden)]
    const CHECKED_BYTES: bool = false;

    /// The HDF5 type description, or why there is none.
    #[doc(hidden)]
    fn descriptor() -> std::result::Result<TypeDescriptor, &'static str>;
}

/// `Element` for `$t`, named `$name`, described as `$desc`; `$checked` where its stored bytes can
/// be invalid. `stored` types are described as hdf5-metno describes them (`H5Type`).
macro_rules! element {
    ($t:ty, $name:literal, $checked:literal, $desc:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const CHECKED_BYTES: bool = $checked;
            fn descriptor() -> std::result::Result<TypeDescriptor, &'static str> {
                $desc
            }
        }
    };
    (stored $($t:ty: $name:literal),*) => {$(
        element!($t, $name, false, Ok(<$t as hdf5::H5Type>::type_descriptor()));
    )*};
}

element!(stored i8: "i8", i16: "i16", i32: "i32", i64: "i64", isize: "isize");
element!(stored u8: "u8", u16: "u16", u32: "u32", u64: "u64", usize: "usize");
element!(stored half::f16: "f16", f32: "f32", f64: "f64");
element!(bool, "bool", true, Ok(TypeDescriptor::Boolean));

const NO_128: &str =
    "HDF5 has no predefined 128-bit integer type, and h5py and numpy cannot read one";
element!(i128, "i128", false, Err(NO_128));
element!(u128, "u128", false, Err(NO_128));

/// The HDF5 description of `T`, or the error naming `T`.
pub(crate) fn descriptor_of<T: Element>() -> Result<TypeDescriptor> {
    T::descriptor().map_err(|reason| Error::UnsupportedType {
        type_name: T::NAME,
        reason,
    })
}

/// A short, numpy-like name of a stored type, for messages (`i32`, `f64`, `bool`, ...).
pub(crate) fn describe(desc: &TypeDescriptor) -> String {
    let bits = |size: IntSize| size as usize * 8;
    match desc {
        TypeDescriptor::Integer(size) => format!("i{}", bits(*size)),
        TypeDescriptor::Unsigned(size) => format!("u{}", bits(*size)),
        TypeDescriptor::Float(size) => format!("f{}", *size as usize * 8),
        TypeDescriptor::Boolean => "bool".into(),
        TypeDescriptor::Enum(e) => format!("an enum over {}", describe(&e.base_type())),
        TypeDescriptor::Compound(_) => "a compound type".into(),
        TypeDescriptor::FixedArray(base, n) => format!("an array type of {n} x {}", describe(base)),
        TypeDescriptor::FixedAscii(n) | TypeDescriptor::FixedUnicode(n) => {
            format!("fixed-length strings of {n} bytes")
        }
        TypeDescriptor::VarLenAscii | TypeDescriptor::VarLenUnicode => {
            "variable-length strings".into()
        }
        TypeDescriptor::VarLenArray(base) => {
            format!("variable-length arrays of {}", describe(base))
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdf5::types::FloatSize;

    #[test]
    fn sizes_of_the_descriptors_match_the_rust_types() {
        fn check<T: Element>() {
            let desc = T::descriptor().unwrap();
            assert_eq!(desc.size(), std::mem::size_of::<T>(), "{}", T::NAME);
        }
        check::<i8>();
        check::<i16>();
        check::<i32>();
        check::<i64>();
        check::<isize>();
        check::<u8>();
        check::<u16>();
        check::<u32>();
        check::<u64>();
        check::<usize>();
        check::<half::f16>();
        check::<f32>();
        check::<f64>();
        check::<bool>();
    }

    #[test]
    fn unsupported_types_are_named_in_the_error() {
        let err = descriptor_of::<i128>().unwrap_err().to_string();
        assert!(err.contains("element type i128"), "{err}");
        assert!(err.contains("128-bit"), "{err}");
        assert!(descriptor_of::<u128>()
            .unwrap_err()
            .to_string()
            .contains("u128"));
    }

    #[test]
    fn stored_types_get_short_names() {
        assert_eq!(describe(&TypeDescriptor::Integer(IntSize::U4)), "i32");
        assert_eq!(describe(&TypeDescriptor::Unsigned(IntSize::U1)), "u8");
        assert_eq!(describe(&TypeDescriptor::Float(FloatSize::U2)), "f16");
        assert_eq!(describe(&TypeDescriptor::Boolean), "bool");
        assert_eq!(
            describe(&TypeDescriptor::VarLenUnicode),
            "variable-length strings"
        );
    }
}
