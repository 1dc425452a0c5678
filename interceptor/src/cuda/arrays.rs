//! CUDA arrays and mipmapped arrays, with their size estimates.
use super::*;

// ------------------------------------------------------------ arrays

#[repr(C)]
pub struct ArrayDesc {
    pub width: usize,
    pub height: usize,
    pub format: c_uint,
    pub channels: c_uint,
}
#[repr(C)]
pub struct ArrayDescV1 {
    pub width: c_uint,
    pub height: c_uint,
    pub format: c_uint,
    pub channels: c_uint,
}
#[repr(C)]
pub struct Array3DDesc {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: c_uint,
    pub channels: c_uint,
    pub flags: c_uint,
}
#[repr(C)]
pub struct Array3DDescV1 {
    pub width: c_uint,
    pub height: c_uint,
    pub depth: c_uint,
    pub format: c_uint,
    pub channels: c_uint,
    pub flags: c_uint,
}

/// Bytes per channel of a CUarray_format (4 for anything unknown).
pub fn format_bytes(f: c_uint) -> u64 {
    match f {
        0x01 | 0x08 => 1,        // (UN)SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // INT32, FLOAT
        0xb0 => 2,               // NV12 (1.5, rounded up)
        0xc0..=0xc2 | 0xc6..=0xc8 => 1,
        0xc3..=0xc5 | 0xc9..=0xcb => 2,
        0x91..=0x9e => 1, // block-compressed: <= 1 byte/texel
        _ => 4,
    }
}

const ARRAY_ROUND: u64 = 64 << 10;

pub fn array_bytes(w: u64, h: u64, d: u64, format: c_uint, channels: c_uint) -> u64 {
    let texels = w.max(1).saturating_mul(h.max(1)).saturating_mul(d.max(1));
    let b = texels
        .saturating_mul(format_bytes(format))
        .saturating_mul((channels as u64).max(1));
    b.div_ceil(ARRAY_ROUND).saturating_mul(ARRAY_ROUND)
}

const CUDA_ARRAY3D_LAYERED: c_uint = 0x01;
const CUDA_ARRAY3D_CUBEMAP: c_uint = 0x04;

pub fn mipmap_bytes(
    w: u64,
    h: u64,
    d: u64,
    format: c_uint,
    channels: c_uint,
    flags: c_uint,
    levels: u32,
) -> u64 {
    let layered = flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP) != 0;
    let mut total: u64 = 0;
    for l in 0..levels.clamp(1, 64) {
        let lw = (w >> l).max(1);
        let lh = if h == 0 { 0 } else { (h >> l).max(1) };
        let ld = if d == 0 || layered {
            d
        } else {
            (d >> l).max(1)
        };
        let texels = lw.saturating_mul(lh.max(1)).saturating_mul(ld.max(1));
        total = total.saturating_add(
            texels
                .saturating_mul(format_bytes(format))
                .saturating_mul((channels as u64).max(1)),
        );
        if lw == 1 && lh <= 1 && (ld <= 1 || layered) {
            break;
        }
    }
    total.div_ceil(ARRAY_ROUND).saturating_mul(ARRAY_ROUND)
}

type Handle = *mut c_void;

unsafe fn destroy_array(k: u64) {
    type F = unsafe extern "C" fn(Handle) -> CUresult;
    if let Some(f) = real_fn!(S::cuArrayDestroy, F) {
        f(k as Handle);
    }
}

/// NumChannels of an array descriptor: 1, 2 or 4 (else the driver says
/// INVALID_VALUE).
fn channels_ok(c: c_uint) -> bool {
    matches!(c, 1 | 2 | 4)
}

/// An array producer: charge the descriptor's estimated size (a NULL
/// descriptor goes straight to the driver, which reports the error).
unsafe fn create_array<D>(
    api: &[u8],
    h: *mut Handle,
    d: *const D,
    call: impl Fn(*mut Handle, *const D) -> CUresult,
    bytes: impl Fn(&D) -> u64,
    valid: impl FnOnce(&D) -> bool,
) -> CUresult {
    if d.is_null() || h.is_null() {
        return call(h, d);
    }
    if !valid(&*d) {
        // e.g. 3 channels: the driver's INVALID_VALUE, not a refusal
        return driver_first(
            api,
            DevSel::Current,
            bytes(&*d),
            KIND_ARRAY,
            || call(h, d),
            || Some(*h as u64),
            |k| destroy_array(k),
        );
    }
    produce(
        api,
        DevSel::Current,
        bytes(&*d),
        KIND_ARRAY,
        || call(h, d),
        || if h.is_null() { None } else { Some(*h as u64) },
        |k| destroy_array(k),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate_v2(h: *mut Handle, d: *const ArrayDesc) -> CUresult {
    let f = real_or!(
        S::cuArrayCreate_v2,
        unsafe extern "C" fn(*mut Handle, *const ArrayDesc) -> CUresult
    );
    create_array(
        b"cuArrayCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| array_bytes(d.width as u64, d.height as u64, 1, d.format, d.channels),
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayCreate(h: *mut Handle, d: *const ArrayDescV1) -> CUresult {
    let f = real_or!(
        S::cuArrayCreate,
        unsafe extern "C" fn(*mut Handle, *const ArrayDescV1) -> CUresult
    );
    create_array(
        b"cuArrayCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| array_bytes(d.width as u64, d.height as u64, 1, d.format, d.channels),
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate_v2(h: *mut Handle, d: *const Array3DDesc) -> CUresult {
    let f = real_or!(
        S::cuArray3DCreate_v2,
        unsafe extern "C" fn(*mut Handle, *const Array3DDesc) -> CUresult
    );
    create_array(
        b"cuArray3DCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| {
            array_bytes(
                d.width as u64,
                d.height as u64,
                d.depth as u64,
                d.format,
                d.channels,
            )
        },
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArray3DCreate(h: *mut Handle, d: *const Array3DDescV1) -> CUresult {
    let f = real_or!(
        S::cuArray3DCreate,
        unsafe extern "C" fn(*mut Handle, *const Array3DDescV1) -> CUresult
    );
    create_array(
        b"cuArray3DCreate",
        h,
        d,
        |h, d| f(h, d),
        |d| {
            array_bytes(
                d.width as u64,
                d.height as u64,
                d.depth as u64,
                d.format,
                d.channels,
            )
        },
        |d| channels_ok(d.channels),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuArrayDestroy(h: Handle) -> CUresult {
    let f = real_or!(S::cuArrayDestroy, unsafe extern "C" fn(Handle) -> CUresult);
    consume(h as u64, KIND_ARRAY, || f(h))
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    h: *mut Handle,
    d: *const Array3DDesc,
    levels: c_uint,
) -> CUresult {
    type F = unsafe extern "C" fn(*mut Handle, *const Array3DDesc, c_uint) -> CUresult;
    let f = real_or!(S::cuMipmappedArrayCreate, F);
    if d.is_null() {
        return f(h, d, levels);
    }
    let n = mipmap_bytes(
        (*d).width as u64,
        (*d).height as u64,
        (*d).depth as u64,
        (*d).format,
        (*d).channels,
        (*d).flags,
        levels,
    );
    let undo = |k: u64| {
        type D = unsafe extern "C" fn(Handle) -> CUresult;
        if let Some(g) = real_fn!(S::cuMipmappedArrayDestroy, D) {
            g(k as Handle);
        }
    };
    if levels == 0 || h.is_null() || !channels_ok((*d).channels) {
        return driver_first(
            b"cuMipmappedArrayCreate",
            DevSel::Current,
            n,
            KIND_MIPMAP,
            || f(h, d, levels),
            || if h.is_null() { None } else { Some(*h as u64) },
            undo,
        );
    }
    produce(
        b"cuMipmappedArrayCreate",
        DevSel::Current,
        n,
        KIND_MIPMAP,
        || f(h, d, levels),
        || if h.is_null() { None } else { Some(*h as u64) },
        |k| {
            type D = unsafe extern "C" fn(Handle) -> CUresult;
            if let Some(g) = real_fn!(S::cuMipmappedArrayDestroy, D) {
                g(k as Handle);
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayDestroy(h: Handle) -> CUresult {
    let f = real_or!(
        S::cuMipmappedArrayDestroy,
        unsafe extern "C" fn(Handle) -> CUresult
    );
    consume(h as u64, KIND_MIPMAP, || f(h))
}
