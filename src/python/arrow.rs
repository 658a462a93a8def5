//! Arrow arrays across the Python boundary, by the Arrow PyCapsule interface: an array comes in
//! through its `__arrow_c_array__` (pyarrow, polars, nanoarrow, arro3 all have it) and goes out
//! as a `pyarrow.Array`. The C data interface itself (the structs, their release callbacks,
//! the checks on import) is arrow-rs's `ffi` module; this file only moves its structs in and
//! out of capsules.

use std::ffi::CStr;

use arrow_array::ffi::{from_ffi, to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{make_array, Array, ArrayRef};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};

const SCHEMA: &CStr = c"arrow_schema";
const ARRAY: &CStr = c"arrow_array";

/// The array behind `obj`'s `__arrow_c_array__`, imported without copying its buffers (they
/// stay owned by the exporter, released when the last Rust reference goes).
pub(crate) fn import(obj: &Bound<'_, PyAny>) -> PyResult<ArrayRef> {
    let py = obj.py();
    if !obj.hasattr(pyo3::intern!(py, "__arrow_c_array__"))? {
        let hint = if obj.hasattr(pyo3::intern!(py, "__arrow_c_stream__"))? {
            " (a chunked array or stream: pass each chunk, or combine_chunks() first)"
        } else {
            ""
        };
        return Err(PyTypeError::new_err(format!(
            "expected an Arrow array (an object with __arrow_c_array__, such as pyarrow.Array), \
             not {}{hint}",
            obj.get_type().name()?
        )));
    }
    let pair = obj.call_method0(pyo3::intern!(py, "__arrow_c_array__"))?;
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) = pair
        .extract()
        .map_err(|_| PyTypeError::new_err("__arrow_c_array__ must return two PyCapsules"))?;
    let schema_ptr = schema
        .pointer_checked(Some(SCHEMA))?
        .cast::<FFI_ArrowSchema>();
    let array_ptr = array.pointer_checked(Some(ARRAY))?.cast::<FFI_ArrowArray>();
    #[allow(unsafe_code)]
    // SAFETY: the capsules carry the names the PyCapsule interface gives to an
    // `ArrowSchema` and an `ArrowArray` (checked by `pointer_checked`), so the pointers are to
    // those C structs, alive as long as the capsules, which are held here. `from_raw` moves
    // the array struct out and leaves an empty one (null `release`) in the capsule, as the
    // interface asks of a consumer, so the capsule's destructor does not release it again.
    // The schema is only read. `from_ffi` checks the array's type against the schema but not
    // its buffers: `validate_full` below does (offsets, UTF-8, lengths as far as the C data
    // interface gives them: a string array's byte count is its last offset), before the
    // matcher reads any row. An empty array is not checked: no row of it is read, and an
    // empty slice of a string array comes in with its offset and no bytes, which the check
    // would refuse.
    let data = unsafe {
        let array = FFI_ArrowArray::from_raw(array_ptr.as_ptr());
        from_ffi(array, schema_ptr.as_ref())
    }
    .and_then(|data| {
        if data.is_empty() {
            return Ok(data);
        }
        data.validate_full().map(|()| data)
    })
    .map_err(|e| PyValueError::new_err(format!("not a valid Arrow array: {e}")))?;
    Ok(make_array(data))
}

/// An arrow-rs error about the arrays a caller passed, as Python raises it: `TypeError` for an
/// array of the wrong type, `OverflowError` for a value past what it must fit (`CastError`),
/// `ValueError` for anything else (a `ComputeError`'s own text: a value the arrays cannot
/// answer for, such as a subscriber with no row in `lookup_arrow`'s names).
pub(crate) fn argument_error(e: arrow_schema::ArrowError) -> PyErr {
    match e {
        arrow_schema::ArrowError::InvalidArgumentError(why) => PyTypeError::new_err(why),
        arrow_schema::ArrowError::CastError(why) => pyo3::exceptions::PyOverflowError::new_err(why),
        arrow_schema::ArrowError::ComputeError(why) => PyValueError::new_err(why),
        other => PyValueError::new_err(other.to_string()),
    }
}

/// One exported array, handed to `pyarrow.array` by its `__arrow_c_array__`: the capsules it
/// returns own the C structs until pyarrow moves them out.
#[pyclass(name = "_ArrowExport", module = "topicmatch._core", frozen)]
struct Export {
    array: ArrayRef,
}

#[pymethods]
impl Export {
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        // A consumer may ask for another type; pyarrow.array does not, and the interface lets
        // an exporter answer with its own type.
        let _ = requested_schema;
        let (array, schema) = to_ffi(&self.array.to_data())
            .map_err(|e| PyValueError::new_err(format!("cannot export Arrow array: {e}")))?;
        let schema = PyCapsule::new_with_value(py, schema, SCHEMA)?;
        let array = PyCapsule::new_with_value(py, array, ARRAY)?;
        PyTuple::new(py, [schema.into_any(), array.into_any()])
    }
}

/// `array` as a `pyarrow.Array` (zero-copy: pyarrow takes over the buffers).
pub(crate) fn export<'py>(
    py: Python<'py>,
    array: impl Array + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    let pyarrow = py.import("pyarrow").map_err(|e| {
        pyo3::exceptions::PyImportError::new_err(format!(
            "the Arrow answer is a pyarrow array: pip install pyarrow ({e})"
        ))
    })?;
    let export = Bound::new(
        py,
        Export {
            array: std::sync::Arc::new(array),
        },
    )?;
    pyarrow.call_method1(pyo3::intern!(py, "array"), (export,))
}
