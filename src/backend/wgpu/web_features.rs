//! WebGPU features that wgpu's web backend does not map (wgpu 30 knows no `subgroups` there):
//! gpukit asks the browser for them itself and tells the shaders that use them.

use js_sys::{Function, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// Runs `call`, in which wgpu calls `GPUAdapter.requestDevice` (synchronously, before its
/// future is first polled), with that method wrapped so that the descriptor also names
/// `subgroups` when the adapter offers it. The wrapper is removed before this returns, so no
/// other request sees it. Where there is no `GPUAdapter` class, `call` runs as it is.
pub(crate) fn requesting_subgroups<T>(call: impl FnOnce() -> T) -> T {
    let Some(proto) = adapter_prototype() else {
        return call();
    };
    let key = JsValue::from_str("requestDevice");
    let Some(original) = Reflect::get(&proto, &key)
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
    else {
        return call();
    };
    let wrap = Function::new_with_args(
        "original",
        "return function (desc) {\
           if (!this.features || !this.features.has('subgroups')) return original.call(this, desc);\
           const d = Object.assign({}, desc);\
           d.requiredFeatures = Array.from(desc && desc.requiredFeatures || []).concat(['subgroups']);\
           return original.call(this, d);\
         };",
    );
    let wrapped = wrap.call1(&JsValue::NULL, &original).ok();
    let installed = wrapped.is_some_and(|w| Reflect::set(&proto, &key, &w).unwrap_or(false));
    let out = call();
    if installed {
        let _ = Reflect::set(&proto, &key, &original);
    }
    out
}

/// Whether the device was given the `subgroups` feature.
pub(crate) fn has_subgroups(device: &wgpu::Device) -> bool {
    device
        .as_webgpu()
        .is_some_and(|d| d.features().has("subgroups"))
}

/// The WGSL a subgroup kernel's text starts with in the browser (naga, which checks the native
/// text, does not parse this directive yet).
pub(crate) const ENABLE_SUBGROUPS: &str = "enable subgroups;\n";

fn adapter_prototype() -> Option<JsValue> {
    let class = Reflect::get(&js_sys::global(), &JsValue::from_str("GPUAdapter")).ok()?;
    Reflect::get(&class, &JsValue::from_str("prototype"))
        .ok()
        .filter(JsValue::is_object)
}

/// Whether the browser's WGSL has the `subgroup_id` language feature: the builtins
/// `subgroup_id` and `num_subgroups` that the subgroup kernels index partial sums with.
pub(crate) fn has_subgroup_id() -> bool {
    wgsl_language_feature("subgroup_id")
}

fn wgsl_language_feature(name: &str) -> bool {
    let get = |v: &JsValue, k: &str| Reflect::get(v, &JsValue::from_str(k)).ok();
    let Some(set) = get(&js_sys::global(), "navigator")
        .and_then(|n| get(&n, "gpu"))
        .and_then(|g| get(&g, "wgslLanguageFeatures"))
    else {
        return false;
    };
    get(&set, "has")
        .and_then(|f| f.dyn_into::<Function>().ok())
        .and_then(|has| has.call1(&set, &JsValue::from_str(name)).ok())
        .is_some_and(|v| v.is_truthy())
}
