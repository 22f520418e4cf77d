//! Trains the draw-a-digit model (examples/digits/mlp.rs) on scikit-learn's handwritten digits,
//! checks it on held-out digits with gpukit and in f64, and writes it for the www page:
//! `cargo run --release --example train_digits [-- OUT.json]` (default www/digits/model.json).
//! Fails when held-out accuracy is below 95%.

#[path = "digits/mlp.rs"]
mod mlp;

use std::path::Path;

use gpukit::Device;

fn main() -> Result<(), String> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "www/digits/model.json".into());
    let data = mlp::load(Path::new("target/data/digits.csv"))?;
    let (train, test) = mlp::split(&data, 0.2, 7);
    let t = std::time::Instant::now();
    let model = mlp::train(&train, 40, 11);
    let seconds = t.elapsed().as_secs_f64();
    let accuracy = model.accuracy(&test);

    // The same held-out digits through gpukit, as the page runs them: one linear+relu, one
    // linear, softmax.
    let device = pollster::block_on(Device::new()).map_err(|e| e.to_string())?;
    let x: Vec<f32> = test.images.iter().flatten().copied().collect();
    let probs = (|| {
        let x = device.tensor(&x, &[test.labels.len(), mlp::INPUTS])?;
        let w1 = device.tensor(&model.w1, &[mlp::HIDDEN, mlp::INPUTS])?;
        let b1 = device.tensor(&model.b1, &[mlp::HIDDEN])?;
        let w2 = device.tensor(&model.w2, &[mlp::CLASSES, mlp::HIDDEN])?;
        let b2 = device.tensor(&model.b2, &[mlp::CLASSES])?;
        let p = x
            .linear(&w1, Some(&b1), Some(gpukit::Activation::Relu))?
            .linear(&w2, Some(&b2), None)?
            .softmax()?;
        p.read_blocking()
    })()
    .map_err(|e| e.to_string())?;
    let gpukit_right = probs
        .chunks(mlp::CLASSES)
        .zip(&test.labels)
        .filter(|(p, &y)| {
            let p: Vec<f64> = p.iter().map(|&v| v as f64).collect();
            mlp::argmax(&p) == y
        })
        .count();
    let gpukit_accuracy = gpukit_right as f64 / test.labels.len() as f64;

    println!(
        "train_digits: {} training digits (x5 with shifts), {} held out; trained in {seconds:.1} s",
        train.labels.len(),
        test.labels.len()
    );
    println!(
        "train_digits: held-out accuracy {:.2}% (f64), {:.2}% through gpukit on {} ({})",
        accuracy * 100.0,
        gpukit_accuracy * 100.0,
        device.info().adapter,
        device.info().backend
    );
    let json = serde_json::json!({
        "source": "scikit-learn 1.9.1 digits (UCI optdigits, 8x8, values 0-16 scaled to 0-1)",
        "layers": [mlp::INPUTS, mlp::HIDDEN, mlp::CLASSES],
        "w1": model.w1, "b1": model.b1, "w2": model.w2, "b2": model.b2,
        "train": train.labels.len(), "test": test.labels.len(),
        "testAccuracy": accuracy,
    });
    if let Some(dir) = Path::new(&out).parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    std::fs::write(&out, json.to_string()).map_err(|e| format!("{out}: {e}"))?;
    println!("train_digits: wrote {out}");
    if accuracy < 0.95 || gpukit_accuracy < 0.95 {
        return Err(format!(
            "held-out accuracy below 95%: {accuracy:.4} / {gpukit_accuracy:.4}"
        ));
    }
    Ok(())
}
