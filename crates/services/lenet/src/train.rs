//! `cohort-lab model train lenet` and `cohort-lab model eval lenet`: LeNet trained on the CPU with
//! candle from MNIST's IDX files (the network of `model.rs`, the same tensor names), written
//! as safetensors; evaluation runs the service's own CPU forward pass, so it measures exactly
//! what the service answers.

use super::mnist::{read_split, Digits, Split};
use super::model::{self, Weights, C1, C2, CLASSES, FLAT, HIDDEN, KERNEL};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Optimizer, VarBuilder, VarMap};
use clap::{value_parser, Arg, ArgMatches, Command};
use cohort_service_api::tools::{Record, ServiceCommand};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

pub const COMMANDS: &[ServiceCommand] = &[
    ServiceCommand {
        name: "train",
        command: train_command,
        run: run_train,
    },
    ServiceCommand {
        name: "eval",
        command: eval_command,
        run: run_eval,
    },
];

fn train_command() -> Command {
    Command::new("train")
        .about("Train LeNet on MNIST on the CPU (candle) and write its weights as safetensors")
        .arg(
            Arg::new("data")
                .long("data")
                .required(true)
                .value_parser(value_parser!(PathBuf))
                .help("MNIST folder: train-images.idx3-ubyte[.gz], train-labels..., t10k-..."),
        )
        .arg(
            Arg::new("out")
                .long("out")
                .required(true)
                .value_parser(value_parser!(PathBuf))
                .help("Weights file to write (safetensors)"),
        )
        .arg(
            Arg::new("epochs")
                .long("epochs")
                .default_value("4")
                .value_parser(value_parser!(usize))
                .help("Passes over the 60K training images"),
        )
        .arg(
            Arg::new("batch")
                .long("batch")
                .default_value("64")
                .value_parser(value_parser!(usize))
                .help("Images per optimizer step"),
        )
        .arg(
            Arg::new("lr")
                .long("lr")
                .default_value("0.001")
                .value_parser(value_parser!(f64))
                .help("Adam's learning rate (halved after every epoch)"),
        )
        .arg(
            Arg::new("seed")
                .long("seed")
                .default_value("1")
                .value_parser(value_parser!(u64))
                .help("Seed of the initial weights and the shuffles"),
        )
}

fn eval_command() -> Command {
    Command::new("eval")
        .about("Accuracy of a LeNet weights file on MNIST's 10K test images (the service's CPU forward pass)")
        .arg(
            Arg::new("data")
                .long("data")
                .required(true)
                .value_parser(value_parser!(PathBuf))
                .help("MNIST folder holding t10k-images.idx3-ubyte[.gz] and t10k-labels..."),
        )
        .arg(
            Arg::new("model")
                .long("model")
                .value_parser(value_parser!(PathBuf))
                .help("Weights file (default: the model the service ships)"),
        )
        .arg(
            Arg::new("out")
                .long("out")
                .value_parser(value_parser!(PathBuf))
                .help("Also write the result as JSON here (with machine, commit, command)"),
        )
}

fn run_train(m: &ArgMatches, _record: Record) -> Result<(), String> {
    let data: &PathBuf = m.get_one("data").expect("required");
    let out: &PathBuf = m.get_one("out").expect("required");
    let epochs = *m.get_one::<usize>("epochs").expect("default");
    let batch = *m.get_one::<usize>("batch").expect("default");
    let lr = *m.get_one::<f64>("lr").expect("default");
    let seed = *m.get_one::<u64>("seed").expect("default");
    if epochs == 0 || batch == 0 || !(lr > 0.0 && lr.is_finite()) {
        return Err("--epochs and --batch must be at least 1, --lr above 0".into());
    }
    let train = read_split(data, Split::Train)?;
    let test = read_split(data, Split::Test)?;
    let w = train_lenet(&train, epochs, batch, lr, seed).map_err(|e| e.to_string())?;
    let acc = accuracy(&w, &test);
    eprintln!(
        "test accuracy {:.2}% ({} images, the service's CPU forward pass)",
        100.0 * acc,
        test.len()
    );
    write_atomic(out, &w.to_safetensors())?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn run_eval(m: &ArgMatches, record: Record) -> Result<(), String> {
    let data: &PathBuf = m.get_one("data").expect("required");
    let model_path = m.get_one::<PathBuf>("model");
    let w = Weights::load(model_path.map(PathBuf::as_path))?;
    let test = read_split(data, Split::Test)?;
    let t = std::time::Instant::now();
    let acc = accuracy(&w, &test);
    let secs = t.elapsed().as_secs_f64();
    println!(
        "accuracy {:.2}% on {} test images ({:.0} images/s on {} threads)",
        100.0 * acc,
        test.len(),
        test.len() as f64 / secs,
        rayon::current_num_threads()
    );
    if let Some(out) = m.get_one::<PathBuf>("out") {
        record(
            out,
            serde_json::json!({
                "model": model_path.map_or("shipped".into(), |p| p.display().to_string()),
                "test_images": test.len(),
                "accuracy": acc,
                "cpu_images_per_s": test.len() as f64 / secs,
                "threads": rayon::current_num_threads(),
            }),
        )?;
    }
    Ok(())
}

/// The share of `set` whose digit the service's CPU forward pass gets right.
pub fn accuracy(w: &Weights, set: &Digits) -> f64 {
    let right: usize = (0..set.len())
        .into_par_iter()
        .map_init(model::Scratch::default, |s, i| {
            (model::argmax(&model::forward(w, set.image(i), s)) == set.labels[i]) as usize
        })
        .sum();
    right as f64 / set.len().max(1) as f64
}

struct Net {
    conv1: candle_nn::Conv2d,
    conv2: candle_nn::Conv2d,
    fc1: candle_nn::Linear,
    fc2: candle_nn::Linear,
}

impl Net {
    fn new(vb: VarBuilder) -> candle_core::Result<Net> {
        let conv = candle_nn::Conv2dConfig::default();
        Ok(Net {
            conv1: candle_nn::conv2d(1, C1, KERNEL, conv, vb.pp("conv1"))?,
            conv2: candle_nn::conv2d(C1, C2, KERNEL, conv, vb.pp("conv2"))?,
            fc1: candle_nn::linear(FLAT, HIDDEN, vb.pp("fc1"))?,
            fc2: candle_nn::linear(HIDDEN, CLASSES, vb.pp("fc2"))?,
        })
    }

    /// `xs`: [batch, 1, 28, 28] in 0..1 -> logits [batch, 10]: model.rs's network.
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.conv1.forward(xs)?.tanh()?.max_pool2d(2)?;
        let x = self.conv2.forward(&x)?.tanh()?.max_pool2d(2)?;
        let x = x.flatten_from(1)?;
        self.fc2.forward(&self.fc1.forward(&x)?.relu()?)
    }
}

fn images_tensor(set: &Digits, idx: &[usize], dev: &Device) -> candle_core::Result<Tensor> {
    let mut v = Vec::with_capacity(idx.len() * model::IMAGE_BYTES);
    for &i in idx {
        v.extend(set.image(i).iter().map(|&p| p as f32 * (1.0 / 255.0)));
    }
    Tensor::from_vec(v, (idx.len(), 1, model::SIDE, model::SIDE), dev)
}

/// Adam on cross-entropy, shuffled mini-batches, the learning rate halved after each epoch.
pub fn train_lenet(
    set: &Digits,
    epochs: usize,
    batch: usize,
    lr: f64,
    seed: u64,
) -> candle_core::Result<Weights> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let dev = Device::Cpu;
    let vars = VarMap::new();
    let net = Net::new(VarBuilder::from_varmap(&vars, DType::F32, &dev))?;
    init_from_seed(&vars, seed, &dev)?;
    let mut opt = candle_nn::AdamW::new(
        vars.all_vars(),
        candle_nn::ParamsAdamW {
            lr,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..set.len()).collect();
    let steps = set.len().div_ceil(batch);
    for epoch in 0..epochs {
        order.shuffle(&mut rng);
        let bar = indicatif::ProgressBar::new(steps as u64).with_style(
            indicatif::ProgressStyle::with_template(
                "epoch {msg} [{bar:30}] {pos}/{len} batches, {eta} left",
            )
            .expect("a valid template"),
        );
        bar.set_message(format!("{}/{epochs}", epoch + 1));
        let mut loss_sum = 0f64;
        for idx in order.chunks(batch) {
            let xs = images_tensor(set, idx, &dev)?;
            let ys: Vec<u32> = idx.iter().map(|&i| set.labels[i] as u32).collect();
            let ys = Tensor::from_vec(ys, idx.len(), &dev)?;
            let loss = candle_nn::loss::cross_entropy(&net.forward(&xs)?, &ys)?;
            opt.backward_step(&loss)?;
            loss_sum += loss.to_scalar::<f32>()? as f64;
            bar.inc(1);
            // Off a terminal the bar draws nothing: a line at every tenth of the epoch, so
            // that a redirected run (minutes an epoch) is not silent.
            let done = bar.position() as usize;
            if bar.is_hidden() && (done * 10 / steps) != ((done - 1) * 10 / steps) {
                eprintln!(
                    "epoch {}/{epochs}: {done} of {steps} batches, mean loss so far {:.4}",
                    epoch + 1,
                    loss_sum / done as f64
                );
            }
        }
        bar.finish_and_clear();
        eprintln!(
            "epoch {}/{epochs}: mean loss {:.4} (lr {:.2e})",
            epoch + 1,
            loss_sum / steps as f64,
            opt.learning_rate()
        );
        opt.set_learning_rate(opt.learning_rate() / 2.0);
    }
    let tensor = |name: &str| -> candle_core::Result<Vec<f32>> {
        let data = vars.data().lock().expect("the var map's lock");
        data.get(name)
            .ok_or_else(|| candle_core::Error::Msg(format!("no variable {name}")))?
            .as_tensor()
            .flatten_all()?
            .to_vec1::<f32>()
    };
    Ok(Weights {
        conv1_w: tensor("conv1.weight")?,
        conv1_b: tensor("conv1.bias")?,
        conv2_w: tensor("conv2.weight")?,
        conv2_b: tensor("conv2.bias")?,
        fc1_w: tensor("fc1.weight")?,
        fc1_b: tensor("fc1.bias")?,
        fc2_w: tensor("fc2.weight")?,
        fc2_b: tensor("fc2.bias")?,
    })
}

/// PyTorch's default initialisation, drawn from `seed` (candle's CPU generator cannot be
/// seeded): every tensor of a layer uniform in +-1/sqrt(fan_in), fan_in = the layer's inputs
/// per output.
fn init_from_seed(vars: &VarMap, seed: u64, dev: &Device) -> candle_core::Result<()> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data = vars.data().lock().expect("the var map's lock");
    for (i, (name, shape)) in model::TENSORS.iter().enumerate() {
        // A bias takes its layer's weight's fan-in (the tensor before it).
        let weight_shape = if name.ends_with(".bias") {
            model::TENSORS[i - 1].1
        } else {
            shape
        };
        let bound = 1.0 / (weight_shape[1..].iter().product::<usize>() as f32).sqrt();
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-bound..bound)).collect();
        let var = data
            .get(*name)
            .ok_or_else(|| candle_core::Error::Msg(format!("no variable {name}")))?;
        var.set(&Tensor::from_vec(v, *shape, dev)?)?;
    }
    Ok(())
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Candle's network and the service's CPU forward pass are the same function: the same
    /// weights give the same logits on real digits.
    #[test]
    fn candles_network_and_the_cpu_forward_pass_agree() {
        let set = read_split(&super::super::testdata_dir(), Split::Test)
            .unwrap()
            .take(32);
        let dev = Device::Cpu;
        let vars = VarMap::new();
        let net = Net::new(VarBuilder::from_varmap(&vars, DType::F32, &dev)).unwrap();
        // The shipped weights into candle's variables.
        let w = Weights::load(None).unwrap();
        {
            let data = vars.data().lock().unwrap();
            for ((name, shape), t) in model::TENSORS.iter().zip(w.tensors()) {
                let v = Tensor::from_vec(t.to_vec(), *shape, &dev).unwrap();
                data[*name].set(&v).unwrap();
            }
        }
        let idx: Vec<usize> = (0..set.len()).collect();
        let got = net
            .forward(&images_tensor(&set, &idx, &dev).unwrap())
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let mut s = model::Scratch::default();
        for (i, row) in got.iter().enumerate() {
            let want = model::forward(&w, set.image(i), &mut s);
            for (g, w) in row.iter().zip(want) {
                assert!(
                    (g - w).abs() <= 1e-3 * (1.0 + w.abs()),
                    "image {i}: {g} vs {w}"
                );
            }
        }
    }

    /// A few hundred steps on the 1000 test-subset digits already learn: the loss falls and
    /// the training digits are mostly right (a real run trains on 60K: docs/lenet.md).
    #[test]
    fn a_short_training_run_learns() {
        let set = read_split(&super::super::testdata_dir(), Split::Test).unwrap();
        let w = train_lenet(&set, 3, 32, 2e-3, 7).unwrap();
        let acc = accuracy(&w, &set);
        assert!(acc > 0.8, "accuracy {acc} after 3 epochs on 1000 digits");
    }
}
