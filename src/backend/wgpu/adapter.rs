//! Finding wgpu adapters, describing them, and ranking them for automatic selection.

use crate::info::{
    is_software_name, vendor_name, Backend, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType,
};

/// The adapter name where the API gives none.
const UNNAMED: &str = "(unnamed adapter)";

/// gpukit's name for a wgpu backend.
pub(crate) fn backend_of(b: wgpu::Backend) -> Option<Backend> {
    match b {
        wgpu::Backend::Vulkan => Some(Backend::Vulkan),
        wgpu::Backend::Metal => Some(Backend::Metal),
        wgpu::Backend::Dx12 => Some(Backend::Dx12),
        wgpu::Backend::Gl => Some(Backend::Gl),
        wgpu::Backend::BrowserWebGpu => Some(Backend::WebGpu),
        _ => None,
    }
}

/// The wgpu backend bit for one of ours (`None` for CUDA and the CPU).
pub(crate) fn wgpu_backend(b: Backend) -> Option<wgpu::Backends> {
    match b {
        Backend::Vulkan => Some(wgpu::Backends::VULKAN),
        Backend::Metal => Some(wgpu::Backends::METAL),
        Backend::Dx12 => Some(wgpu::Backends::DX12),
        Backend::Gl => Some(wgpu::Backends::GL),
        Backend::WebGpu => Some(wgpu::Backends::BROWSER_WEBGPU),
        Backend::Cuda | Backend::Cpu => None,
    }
}

/// Why a wgpu backend cannot exist in this build, if it cannot.
pub(crate) fn not_compiled(b: Backend) -> Option<String> {
    let bits = wgpu_backend(b)?;
    if wgpu::Instance::enabled_backend_features().contains(bits) {
        return None;
    }
    Some(match b {
        Backend::Gl if cfg!(web) => "WebGL2 has no compute shaders".into(),
        Backend::WebGpu if cfg!(native) => {
            "WebGPU exists only in the browser (wasm32 builds)".into()
        }
        _ => format!("{b} is not on this platform"),
    })
}

/// Every adapter of the given backends. In the browser, where wgpu would panic without
/// WebGPU (for example in Node), support is checked first.
pub(crate) async fn adapters(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    #[cfg(web)]
    {
        if !backends.contains(wgpu::Backends::BROWSER_WEBGPU)
            || !wgpu::util::is_browser_webgpu_supported().await
        {
            return Vec::new();
        }
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::BROWSER_WEBGPU,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        let options = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        };
        instance
            .request_adapter(&options)
            .await
            .into_iter()
            .collect()
    }
    #[cfg(native)]
    {
        driver_serialized(|| enumerate_now(backends))
    }
}

/// Enumerates adapters natively (the caller holds the driver lock).
#[cfg(native)]
fn enumerate_now(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
    });
    crate::future::block_on(instance.enumerate_adapters(backends))
}

/// Runs driver initialisation (instance creation, adapter enumeration, device requests) one
/// thread at a time; devices are also torn down under the same lock. On NVIDIA H100 and H200
/// (driver 580), tests creating and dropping devices on several threads at once hung inside the
/// driver (threads parked on its mutexes, one spinning) in 3 runs of 8; with creation
/// serialised, 1 of 20; with teardown serialised too, 0 of 30. These calls are rare and their
/// futures are ready at once natively, so the lock costs nothing measurable and is never held
/// across an `.await`.
#[cfg(native)]
pub(crate) fn driver_serialized<T>(f: impl FnOnce() -> T) -> T {
    let _driver = driver_lock();
    f()
}

/// The process-wide lock of [`driver_serialized`]; devices also hold it while they are torn
/// down. Not reentrant: nothing that takes it may drop the last handle of a device.
#[cfg(native)]
pub(crate) fn driver_lock() -> std::sync::MutexGuard<'static, ()> {
    static DRIVER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    DRIVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Describes an adapter (the `selection` field is left empty).
pub(crate) fn describe(adapter: &wgpu::Adapter) -> DeviceInfo {
    let ai = adapter.get_info();
    let limits = adapter.limits();
    let features = adapter.features();
    let device_type = match ai.device_type {
        wgpu::DeviceType::DiscreteGpu => DeviceType::Discrete,
        wgpu::DeviceType::IntegratedGpu => DeviceType::Integrated,
        wgpu::DeviceType::VirtualGpu => DeviceType::Virtual,
        wgpu::DeviceType::Cpu => DeviceType::Cpu,
        wgpu::DeviceType::Other => DeviceType::Other,
    };
    let driver = [ai.driver.as_str(), ai.driver_info.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    DeviceInfo {
        backend: backend_of(ai.backend).unwrap_or(Backend::WebGpu),
        software: device_type == DeviceType::Cpu
            || is_software_name(&ai.name)
            || is_software_name(&ai.driver),
        adapter: if ai.name.is_empty() {
            UNNAMED.into()
        } else {
            ai.name.clone()
        },
        vendor: vendor_name(ai.vendor),
        device_type,
        driver,
        limits: DeviceLimits {
            max_storage_binding: limits.max_storage_buffer_binding_size,
            max_buffer: limits.max_buffer_size,
            workgroup_storage: limits.max_compute_workgroup_storage_size,
            invocations_per_workgroup: limits.max_compute_invocations_per_workgroup,
            workgroups_per_dimension: limits.max_compute_workgroups_per_dimension,
        },
        features: DeviceFeatures {
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            timestamp_query: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            cooperative_matrix: cooperative_matrix(adapter),
        },
        memory_bytes: None,
        selection: String::new(),
        policy: None,
        cuda: None,
    }
}

/// Whether gpukit's cooperative-matrix matmul (shaders/matmul_coop.wgsl) runs on this
/// adapter: natively, with wgpu's experimental cooperative-matrix extension offering 16 x 16 x
/// 16 products of f16 into f32, shader-f16, and subgroups of exactly 32 invocations (the kernel
/// gives each block of 32 consecutive invocations its own tiles). NVIDIA over Vulkan has all
/// of it. `GPUKIT_COOPERATIVE_MATRIX=0` turns it off.
pub(crate) fn cooperative_matrix(adapter: &wgpu::Adapter) -> bool {
    #[cfg(native)]
    {
        if matches!(
            std::env::var("GPUKIT_COOPERATIVE_MATRIX").as_deref(),
            Ok("0" | "off" | "false")
        ) {
            return false;
        }
        let info = adapter.get_info();
        let needed = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16;
        adapter.features().contains(needed)
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32
            && adapter.cooperative_matrix_properties().iter().any(|p| {
                (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                    && p.ab_type == wgpu::CooperativeScalarType::F16
                    && p.cr_type == wgpu::CooperativeScalarType::F32
            })
    }
    #[cfg(web)]
    {
        let _ = adapter;
        false
    }
}

/// Why gpukit's kernels cannot run on an adapter, if they cannot.
pub(crate) fn unsuitable(adapter: &wgpu::Adapter) -> Option<String> {
    let caps = adapter.get_downlevel_capabilities();
    let l = adapter.limits();
    if !caps.flags.contains(wgpu::DownlevelFlags::COMPUTE_SHADERS) {
        return Some("no compute shaders".into());
    }
    if l.max_compute_invocations_per_workgroup < 256 || l.max_compute_workgroup_size_x < 256 {
        return Some(format!(
            "workgroups of 256 invocations are needed, the adapter allows {}",
            l.max_compute_invocations_per_workgroup
                .min(l.max_compute_workgroup_size_x)
        ));
    }
    if l.max_storage_buffers_per_shader_stage < 5 {
        return Some(format!(
            "5 storage buffers per shader are needed, the adapter allows {}",
            l.max_storage_buffers_per_shader_stage
        ));
    }
    if l.max_compute_workgroup_storage_size < 2048 {
        return Some("less than 2 KiB of workgroup memory".into());
    }
    None
}

/// Sort key for automatic selection, best first: GL after every other API (it is only a
/// fallback where nothing else runs); then discrete, integrated, virtual or other, software;
/// then Vulkan, Metal and WebGPU before DX12.
pub(crate) fn rank(info: &DeviceInfo) -> (u8, u8, u8) {
    let kind = if info.software {
        4
    } else {
        match info.device_type {
            DeviceType::Discrete => 0,
            DeviceType::Integrated => 1,
            DeviceType::Virtual => 2,
            DeviceType::Other => 3,
            DeviceType::Cpu => 4,
        }
    };
    let api = match info.backend {
        Backend::Vulkan | Backend::Metal | Backend::WebGpu => 0,
        _ => 1,
    };
    (u8::from(info.backend == Backend::Gl), kind, api)
}

/// The native APIs and WebGPU, tried before GL.
pub(crate) const PRIMARY: wgpu::Backends = wgpu::Backends::VULKAN
    .union(wgpu::Backends::METAL)
    .union(wgpu::Backends::DX12)
    .union(wgpu::Backends::BROWSER_WEBGPU);

/// Describes every adapter of the given backends and whether gpukit can use it. Natively the
/// adapters are created and dropped under the driver lock, since tearing down a GL (EGL)
/// instance while another thread created one hung NVIDIA's driver.
pub(crate) async fn describe_all(backends: wgpu::Backends) -> Vec<(DeviceInfo, Option<String>)> {
    let describe_each =
        |list: Vec<wgpu::Adapter>| list.iter().map(|a| (describe(a), unsuitable(a))).collect();
    #[cfg(native)]
    {
        driver_serialized(|| describe_each(enumerate_now(backends)))
    }
    #[cfg(web)]
    {
        describe_each(adapters(backends).await)
    }
}

/// Usable adapters, best first, and the reasons others were rejected. GL is enumerated only
/// when no other API has a usable adapter, so that EGL is not initialised for nothing.
pub(crate) async fn ranked_preferring_native() -> (Vec<(wgpu::Adapter, DeviceInfo)>, Vec<String>) {
    let (usable, mut rejected) = ranked(PRIMARY).await;
    if !usable.is_empty() {
        return (usable, rejected);
    }
    let (gl, gl_rejected) = ranked(wgpu::Backends::GL).await;
    rejected.extend(gl_rejected);
    (gl, rejected)
}

/// Usable adapters of the given backends, best first, and the reasons others were rejected.
pub(crate) async fn ranked(
    backends: wgpu::Backends,
) -> (Vec<(wgpu::Adapter, DeviceInfo)>, Vec<String>) {
    let mut usable = Vec::new();
    let mut rejected = Vec::new();
    for adapter in adapters(backends).await {
        let info = describe(&adapter);
        match unsuitable(&adapter) {
            Some(why) => rejected.push(format!("{} ({}): {why}", info.adapter, info.backend)),
            None => usable.push((adapter, info)),
        }
    }
    // A few adapters: the small stable sort, not the standard library's (kilobytes of wasm).
    crate::small_sort::sort_small_by(&mut usable, |a, b| rank(&a.1) < rank(&b.1));
    (usable, rejected)
}

/// In a browser, the name and vendor of the adapter from `GPUAdapter.info`: wgpu keeps only
/// its `description`, which browsers leave empty to limit fingerprinting or fill with the
/// driver's version (Dawn in Node: "NVIDIA: 580.159.04 ..."), and no vendor, while `vendor`,
/// `architecture` and `device` ("google", "swiftshader"; "nvidia", "hopper") are given. The
/// name becomes those three; a description wgpu took for the name moves to `driver` when that
/// is empty. The browser's default adapter is the one wgpu opened (gpukit asks for no other).
/// Leaves `info` as it is where the browser says nothing more.
#[cfg(target_arch = "wasm32")]
pub(crate) async fn name_from_browser(info: &mut DeviceInfo) {
    use js_sys::{Function, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    let get = |v: &JsValue, k: &str| Reflect::get(v, &JsValue::from_str(k)).ok();
    let Some(gpu) = get(&js_sys::global(), "navigator").and_then(|n| get(&n, "gpu")) else {
        return;
    };
    let request = get(&gpu, "requestAdapter").and_then(|f| f.dyn_into::<Function>().ok());
    let Some(promise) = request
        .and_then(|f| f.call0(&gpu).ok())
        .and_then(|p| p.dyn_into::<Promise>().ok())
    else {
        return;
    };
    let Ok(adapter) = wasm_bindgen_futures::JsFuture::from(promise).await else {
        return;
    };
    let Some(details) = get(&adapter, "info").filter(|i| i.is_object()) else {
        return;
    };
    let field = |k: &str| {
        get(&details, k)
            .and_then(|v| v.as_string())
            .filter(|s| !s.is_empty())
    };
    let (vendor, architecture, device) = (field("vendor"), field("architecture"), field("device"));
    let name: Vec<String> = [&vendor, &architecture, &device]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    if !name.is_empty() {
        let described = std::mem::replace(&mut info.adapter, name.join(" "));
        if info.driver.is_empty() && !described.is_empty() && described != UNNAMED {
            info.driver = described;
        }
        info.software |= is_software_name(&info.adapter);
    }
    if let Some(v) = vendor {
        info.vendor = v;
    }
}
