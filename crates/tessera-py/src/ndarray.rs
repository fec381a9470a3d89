//! A NumPy array's memory as the datatype engine sees it: the data pointer, the bytes its
//! elements span, and the memory type that walks them through their strides. Nothing is
//! copied: the client reads or writes the array's own buffer, run by run.

use numpy::npyffi::flags::NPY_ARRAY_WRITEABLE;
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use tessera_client::dtype::Order;
use tessera_client::Datatype;

use crate::error;
use crate::layout::{memory_layout, Element, DTYPE_DEPTH_MAX};

/// The element a dtype describes (its fields, for a structured dtype).
pub fn element(descr: &Bound<'_, PyArrayDescr>, depth: usize) -> PyResult<Element> {
    if depth > DTYPE_DEPTH_MAX {
        return Err(PyValueError::new_err(format!(
            "the dtype nests deeper than dtype_depth_max ({DTYPE_DEPTH_MAX})"
        )));
    }
    if descr.has_object() {
        return Err(PyTypeError::new_err(format!(
            "dtype {descr} holds Python objects, whose bytes are pointers; they cannot be stored"
        )));
    }
    let itemsize = descr.itemsize() as u64;
    if let Some(names) = descr.names() {
        let mut fields = Vec::with_capacity(names.len());
        for name in names {
            let (field, offset) = descr.get_field(&name)?;
            fields.push((offset as u64, element(&field, depth + 1)?));
        }
        return Ok(Element::Struct { itemsize, fields });
    }
    if descr.has_subarray() {
        let count = descr.shape().iter().map(|&n| n as u64).product();
        return Ok(Element::Array {
            count,
            base: Box::new(element(&descr.base(), depth + 1)?),
        });
    }
    Ok(Element::Bytes(itemsize))
}

/// The datatype of one element of `descr`.
pub fn element_type(descr: &Bound<'_, PyArrayDescr>) -> PyResult<Datatype> {
    element(descr, 0)?
        .datatype()
        .map_err(|err| error::layout(&err))
}

/// An array's memory: where its elements lie and how to walk them.
pub struct ArrayMemory {
    /// The lowest byte any element touches.
    pub base: *mut u8,
    /// Bytes from `base` to one past the highest byte touched (0: no elements).
    pub length: usize,
    /// The memory type over `[base, base + length)`, visiting elements in the file's order.
    pub memtype: Datatype,
    /// The array's shape.
    pub shape: Vec<u64>,
}

impl ArrayMemory {
    /// The memory of `array`, walked in `order`; `writable` asks that the array may be
    /// written (a read's destination).
    pub fn of(array: &Bound<'_, PyUntypedArray>, order: Order, writable: bool) -> PyResult<Self> {
        let shape: Vec<u64> = array.shape().iter().map(|&n| n as u64).collect();
        let strides: Vec<i64> = array.strides().iter().map(|&s| s as i64).collect();
        let descr = array.dtype();
        // SAFETY: `array` is a live ndarray (the bound reference keeps it alive), so its
        // object header may be read.
        let (data, flags) = unsafe {
            let raw = &*array.as_array_ptr();
            (raw.data.cast::<u8>(), raw.flags)
        };
        if writable && flags & NPY_ARRAY_WRITEABLE == 0 {
            return Err(PyValueError::new_err(
                "the destination array is read-only (its WRITEABLE flag is off)",
            ));
        }
        let element = element_type(&descr)?;
        let layout = memory_layout(&shape, &strides, &element, descr.itemsize() as u64, order)
            .map_err(|err| error::layout(&err))?;
        Ok(match layout {
            None => Self {
                base: data,
                length: 0,
                memtype: element,
                shape,
            },
            Some(layout) => Self {
                // `low` is 0 or negative: the lowest element lies that far below the data
                // pointer (negative strides); wrapping_offset keeps the arithmetic defined.
                base: data.wrapping_offset(isize::try_from(layout.low).map_err(|_| {
                    PyValueError::new_err("the array's strides reach past the address space")
                })?),
                length: usize::try_from(layout.length).map_err(|_| {
                    PyValueError::new_err("the array spans more bytes than this machine addresses")
                })?,
                memtype: layout.datatype,
                shape,
            },
        })
    }

    /// The span as a slice.
    ///
    /// # Safety
    /// The array this memory came from must stay alive and keep its buffer for the life of
    /// the slice, and nothing may write the buffer meanwhile.
    pub unsafe fn bytes<'a>(&self) -> &'a [u8] {
        if self.length == 0 {
            return &[];
        }
        // SAFETY: `[base, base + length)` is the span of the array's elements (NumPy
        // guarantees every element lies inside its buffer); the caller keeps it alive.
        unsafe { std::slice::from_raw_parts(self.base, self.length) }
    }

    /// The span as a mutable slice.
    ///
    /// # Safety
    /// As [`ArrayMemory::bytes`], and nothing else may read or write the buffer meanwhile.
    pub unsafe fn bytes_mut<'a>(&self) -> &'a mut [u8] {
        if self.length == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`; the caller guarantees exclusive use.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.length) }
    }
}
