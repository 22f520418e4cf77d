//! The draw-a-digit model the www page ships (www/digits/model.json, written by
//! `examples/train_digits.rs` in `make www`) on the held-out digits it was not trained on:
//! at least 95% right in f64, and gpukit (CPU backend and the GPU suite's adapter) predicts
//! the same classes. Fails when the data or the model is missing: `make test` makes both.
#![cfg(not(target_arch = "wasm32"))]

#[path = "../examples/digits/mlp.rs"]
mod mlp;

use std::path::Path;

use gpukit::{Activation, Device};

fn shipped_model() -> mlp::Mlp {
    let text = std::fs::read_to_string("www/digits/model.json")
        .expect("www/digits/model.json (make www trains it)");
    let v: serde_json::Value = serde_json::from_str(&text).expect("model.json is JSON");
    let floats = |k: &str| -> Vec<f32> {
        v[k].as_array()
            .unwrap_or_else(|| panic!("model.json has {k}"))
            .iter()
            .map(|x| x.as_f64().expect("a number") as f32)
            .collect()
    };
    mlp::Mlp {
        w1: floats("w1"),
        b1: floats("b1"),
        w2: floats("w2"),
        b2: floats("b2"),
    }
}

fn held_out() -> mlp::Digits {
    let data = mlp::load(Path::new("target/data/digits.csv"))
        .expect("the digits (scripts/fetch-digits.sh)");
    assert_eq!(data.labels.len(), 1797);
    mlp::split(&data, 0.2, 7).1
}

fn gpukit_classes(device: &Device, m: &mlp::Mlp, d: &mlp::Digits) -> Vec<usize> {
    let x: Vec<f32> = d.images.iter().flatten().copied().collect();
    let t = |v: &[f32], s: &[usize]| device.tensor(v, s).unwrap();
    let p = t(&x, &[d.labels.len(), mlp::INPUTS])
        .linear(
            &t(&m.w1, &[mlp::HIDDEN, mlp::INPUTS]),
            Some(&t(&m.b1, &[mlp::HIDDEN])),
            Some(Activation::Relu),
        )
        .unwrap()
        .linear(
            &t(&m.w2, &[mlp::CLASSES, mlp::HIDDEN]),
            Some(&t(&m.b2, &[mlp::CLASSES])),
            None,
        )
        .unwrap()
        .softmax()
        .unwrap()
        .read_blocking()
        .unwrap();
    p.chunks(mlp::CLASSES)
        .map(|r| mlp::argmax(&r.iter().map(|&v| v as f64).collect::<Vec<_>>()))
        .collect()
}

#[test]
fn the_shipped_model_is_at_least_95_percent_right_on_held_out_digits() {
    let (m, test) = (shipped_model(), held_out());
    let accuracy = m.accuracy(&test);
    assert!(accuracy >= 0.95, "held-out accuracy {accuracy}");
    let f64_classes: Vec<usize> = test
        .images
        .iter()
        .map(|x| mlp::argmax(&m.forward(x)))
        .collect();
    let gpu = Device::new_blocking().expect("a device");
    for device in [Device::cpu(), gpu] {
        let got = gpukit_classes(&device, &m, &test);
        let same = got.iter().zip(&f64_classes).filter(|(a, b)| a == b).count();
        assert!(
            same + 1 >= got.len(),
            "{}: {same} of {} predictions agree with f64",
            device.info().adapter,
            got.len()
        );
    }
}
