#!/usr/bin/env bash
# Hostile inputs to the real executables (issue 14): each line runs build/bin/trainer or
# build/bin/fewbit and expects an exit code and a message. Prints one line per input and a
# count; exits 1 when any input got another exit code or message.
#   tests/experiments/hostile_inputs.sh [BUILD_DIR]      (needs Fashion-MNIST: dataset-fashion-mnist)
# About 3 minutes on 2 cores: the inputs that need an earlier run or a checkpoint train one step.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build}/bin
W=$(mktemp -d /tmp/packrat_hostile.XXXXXX)
trap 'rm -rf "$W"' EXIT
Q=(--config configs/quickstart.yaml --set data.limit_train=256 --set data.limit_test=256 --set train.epochs=1
   --set train.steps_per_epoch=1 --set threads=2)
tried=0 ok=0 failed=()

# expect NAME RC MESSAGE CMD...: CMD must exit with RC and print MESSAGE (a fixed string).
expect() {
  local name=$1 rc=$2 msg=$3
  shift 3
  tried=$((tried + 1))
  local out got
  out=$(timeout 300 "$@" 2>&1)
  got=$?
  if [[ $got == "$rc" ]] && grep -qF -- "$msg" <<<"$out"; then
    ok=$((ok + 1))
    printf 'ok    %-44s exit %s: %s\n' "$name" "$got" "$(grep -F -- "$msg" <<<"$out" | head -1 | cut -c1-150)"
  else
    failed+=("$name")
    printf 'FAIL  %-44s exit %s (want %s and \"%s\"): %s\n' "$name" "$got" "$rc" "$msg" "$(tail -2 <<<"$out" | cut -c1-300)"
  fi
}

# edit_checkpoint FILE OUT PYTHON: rewrites a safetensors file, PYTHON edits `t` (name -> bytearray,
# with `hdr` the header) in place.
edit_checkpoint() {
  python3 - "$1" "$2" "$3" <<'EOF'
import json, struct, sys
src, dst, code = sys.argv[1:]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
hdr = json.loads(b[8:8 + n]); data = bytearray(b[8 + n:])
t = {k: v for k, v in hdr.items() if k != '__metadata__'}
def view(name):
  s, e = t[name]['data_offsets']; return memoryview(data)[s:e]
def set_i64(name, i, v): view(name)[8 * i:8 * i + 8] = struct.pack('<q', v)
def set_f32(name, i, v): view(name)[4 * i:4 * i + 4] = struct.pack('<f', v)
exec(code)
h = json.dumps(hdr).encode(); h += b' ' * (-len(h) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(h)) + h + bytes(data))
EOF
}

# --- runs the inputs below need -------------------------------------------------------------
"$BIN/trainer" "${Q[@]}" --set output.dir="$W/earlier" >/dev/null 2>&1 || echo "setup: a training run failed"
CK=$W/earlier/checkpoints/epoch_0001.safetensors
mkdir -p "$W/r_nan/checkpoints" "$W/r_step/checkpoints" "$W/r_epoch/checkpoints" "$W/r_name/checkpoints"
cp "$W/earlier/config.yaml" "$W/r_nan/"; cp "$W/earlier/config.yaml" "$W/r_step/"
cp "$W/earlier/config.yaml" "$W/r_epoch/"; cp "$W/earlier/config.yaml" "$W/r_name/"
for d in r_nan r_step r_epoch r_name; do sed -i "s|$W/earlier|$W/$d|" "$W/$d/config.yaml"; done
edit_checkpoint "$CK" "$W/r_nan/checkpoints/epoch_0001.safetensors" "set_f32('model.fc.weight', 3, float('nan'))"
edit_checkpoint "$CK" "$W/r_step/checkpoints/epoch_0001.safetensors" "set_i64('trainer.step', 0, -5); set_i64('trainer.rng', 2, -5)"
edit_checkpoint "$CK" "$W/r_epoch/checkpoints/epoch_0001.safetensors" "set_i64('trainer.epoch', 0, 10**15); set_i64('trainer.rng', 1, 10**15)"
cp "$CK" "$W/r_name/checkpoints/epoch_0007.safetensors"
"$BIN/trainer" "${Q[@]}" --set output.dir="$W/gact" --set saved_tensors.rules=[] \
  --set 'saved_tensors.default={scheme: gact, avg_bits: 3, tensors_per_refresh: 2}' >/dev/null 2>&1 || echo "setup: a gact run failed"
mkdir -p "$W/r_gact/checkpoints"
sed "s|$W/gact|$W/r_gact|" "$W/gact/config.yaml" >"$W/r_gact/config.yaml"
edit_checkpoint "$W/gact/checkpoints/epoch_0001.safetensors" "$W/r_gact/checkpoints/epoch_0001.safetensors" \
  "set_i64('gact.0.tensors', 0, 2**62)"
touch "$W/a_file"
mkdir -p "$W/ckpt_file" "$W/ckpt_dir/checkpoints/epoch_0001.safetensors" "$W/no_ckpt"
touch "$W/ckpt_file/checkpoints"
cat >"$W/dup_key.yaml" <<EOF
data: {dataset: fashion_mnist, batch_size: 64, batch_size: 32}
model: {arch: resnet20}
EOF
cat >"$W/dup_section.yaml" <<EOF
data: {dataset: fashion_mnist}
model: {arch: resnet20}
data: {dataset: mnist}
EOF
cat >"$W/no_value.yaml" <<EOF
data:
  dataset: fashion_mnist
  batch_size:
model: {arch: resnet20}
EOF

# --- the inputs ---------------------------------------------------------------------------
T=$BIN/trainer
expect "fresh run into an earlier run"        2 "holds an earlier run" "$T" "${Q[@]}" --set output.dir="$W/earlier"
expect "--overwrite with --resume"            2 "--overwrite applies to a fresh training run" "$T" --resume "$W/earlier" --overwrite
expect "--find-max-batch 9000000000G"         2 "more than 4 EiB" "$T" "${Q[@]}" --find-max-batch 9000000000G
expect "--find-max-batch 99999999999999999999" 2 "expected a byte count" "$T" "${Q[@]}" --find-max-batch 99999999999999999999
expect "--find-max-batch -5G"                 2 "expected a byte count" "$T" "${Q[@]}" --find-max-batch -5G
expect "resize(1e10)"                         2 "larger than 65536" "$T" "${Q[@]}" --set 'data.train_transforms=["resize(1e10)"]'
expect "resize(1e30)"                         2 "larger than 65536" "$T" "${Q[@]}" --set 'data.train_transforms=["resize(1e30)"]'
expect "random_crop(28, 1e19)"                2 "larger than 65536" "$T" "${Q[@]}" --set 'data.train_transforms=["random_crop(28, 1e19)"]'
expect "resize(65536): 4 GiB per image"       2 "make images of (1, 65536, 65536)" "$T" "${Q[@]}" --set output.dir="$W/big" --set 'data.train_transforms=["resize(65536)"]'
expect "output.dir is a file"                 2 "$W/a_file is a file, not a directory" "$T" "${Q[@]}" --set output.dir="$W/a_file"
expect "output.dir below a file"              2 "cannot create the directory" "$T" "${Q[@]}" --set output.dir="$W/a_file/run"
expect "output.dir not writable (/proc)"      2 "/proc/packrat_run" "$T" "${Q[@]}" --set output.dir=/proc/packrat_run
expect "checkpoints is a file"                2 "$W/ckpt_file/checkpoints is a file" "$T" "${Q[@]}" --set output.dir="$W/ckpt_file"
expect "checkpoint path is a directory"       2 "epoch_0001.safetensors is not a regular file" "$T" "${Q[@]}" --set output.dir="$W/ckpt_dir"
expect "--resume without a checkpoint"        2 "no checkpoint in" "$T" --config configs/quickstart.yaml --resume "$W/no_ckpt"
cp -r "$W/earlier" "$W/r_metrics"; sed -i "s|$W/earlier|$W/r_metrics|" "$W/r_metrics/config.yaml"
echo "garbage,line" >>"$W/r_metrics/metrics.csv"
expect "--resume, damaged metrics.csv"        2 "metrics.csv: line 3 is not a metrics row" "$T" --resume "$W/r_metrics" --set train.epochs=2
cp -r "$W/earlier" "$W/r_adamw"; sed -i "s|$W/earlier|$W/r_adamw|" "$W/r_adamw/config.yaml"
expect "--resume an SGD run with AdamW"       2 "epoch_0001.safetensors: optimizer state: entry 'momentum_buffer." "$T" --resume "$W/r_adamw" --set 'optimizer={name: adamw, lr: 0.001}' --set train.epochs=2
expect "--config DIRECTORY"                   2 "is a directory, not a config file" "$T" --config "$W"
expect "NaN test loss"                        2 "the test loss is" "$T" "${Q[@]}" --set output.dir="$W/nan" --set 'data.test_transforms=["normalize(-3e38 / 1)"]'
expect "NaN weight in a checkpoint"           2 "'model.fc.weight' holds nan at element 3" "$T" --resume "$W/r_nan" --set train.epochs=2
expect "negative step in a checkpoint"        2 "trainer.step is -5" "$T" --resume "$W/r_step" --set train.epochs=2
expect "absurd epoch in a checkpoint"         2 "trainer.epoch is 1000000000000000" "$T" --resume "$W/r_epoch" --set train.epochs=2
expect "checkpoint named for another epoch"   2 "named for epoch 7 but holds epoch 1" "$T" --resume "$W/r_name" --set train.epochs=2
expect "absurd GACT tensor count"             2 "'gact.0.tensors' is 4611686018427387904" "$T" --resume "$W/r_gact" --set train.epochs=2
expect "warm-up shorter than a step (capped)" 0 "lr 0.1 |" "$T" "${Q[@]}" --set output.dir="$W/warm" --set 'schedule={name: constant, warmup_epochs: 0.1}'
expect "test images of another size"          2 "t10k-images-idx3-ubyte.gz) are (1, 20, 20)" "$T" "${Q[@]}" --set output.dir="$W/size" --set 'data.test_transforms=["resize(20)"]'
expect "model.in_channels disagrees"          2 "model.in_channels is 3, but the fashion_mnist images have 1" "$T" "${Q[@]}" --set output.dir="$W/inch" --set model.in_channels=3
expect "in_channels, --memory-report-only"    2 "model.in_channels is 3" "$T" "${Q[@]}" --set output.dir="$W/inch2" --set model.in_channels=3 --memory-report-only
# Keys accepted and ignored, or errors that blamed the wrong key (issue 40, class 6).
expect "ViT model.width_mult"                 2 "model.width_mult: vit_tiny_fmnist does not use this key" "$T" --config configs/vit_fmnist.yaml --set model.width_mult=1 --set output.dir="$W/k1"
expect "GPT model.image_size"                 2 "model.image_size: gpt_small does not use this key" "$T" --config configs/gpt_fortunes.yaml --set model.image_size=32 --set output.dir="$W/k2"
expect "ResNet model.patch_size"              2 "model.patch_size: resnet20 does not use this key" "$T" "${Q[@]}" --set model.patch_size=4 --set output.dir="$W/k3"
expect "gact-L1 with bits: 2"                 2 "'bits' does not apply to gact" "$T" "${Q[@]}" --set 'saved_tensors.default={scheme: gact-L1, bits: 2}' --set output.dir="$W/k4"
expect "text data with a ResNet"              2 "data.dataset: is text (token sequences), but model.arch resnet20 takes images" "$T" "${Q[@]}" --set data.dataset=text --set output.dir="$W/k5"
expect "data.seq_len on images"               2 "data.seq_len: only applies to data.dataset text" "$T" "${Q[@]}" --set data.seq_len=64 --set output.dir="$W/k6"
expect "model.classes below the dataset's"    2 "model.classes is 5, but the fashion_mnist data has 10 classes" "$T" "${Q[@]}" --set model.classes=5 --memory-report-only --set output.dir="$W/k7"
expect "rule layers: that match no layer"     2 "layers pattern \"layr1.*\" matches no layer of resnet20" "$T" "${Q[@]}" --set 'saved_tensors.rules=[{layers: [layr1.*], scheme: fp32}]' --memory-report-only --set output.dir="$W/k8"
expect "--gradient-fidelity 1000000000"       2 "--gradient-fidelity: 1000000000 draws is more than the 10000 allowed" "$T" "${Q[@]}" --gradient-fidelity 1000000000
expect "--resume \"\""                          2 "--resume: needs a run directory, got an empty string" "$T" --resume ""
expect "YAML duplicate key"                   2 "duplicate key 'batch_size'" "$T" --config "$W/dup_key.yaml" --memory-report-only --set output.dir="$W/y1"
expect "YAML duplicate section"               2 "data (line 3): duplicate key 'data', first given on line 1" "$T" --config "$W/dup_section.yaml" --memory-report-only --set output.dir="$W/y2"
expect "YAML key with no value"               2 "data.batch_size (line 3): has no value" "$T" --config "$W/no_value.yaml" --memory-report-only --set output.dir="$W/y3"
expect "--set key="                           2 "--set data.batch_size=: no value after '='" "$T" "${Q[@]}" --set data.batch_size=
expect "--set a.b.=5"                         2 "empty key component" "$T" "${Q[@]}" --set data.batch_size.=5
expect "--set key=~"                          2 "data.batch_size: has no value" "$T" "${Q[@]}" --set 'data.batch_size=~'
expect "--set path blamed on the --set"       2 "--set data.nope.x: data.nope: unknown key" "$T" "${Q[@]}" --set data.nope.x=1
expect "bad transform named with its key"     2 "data.train_transforms: transform 'bogus'" "$T" "${Q[@]}" --set 'data.train_transforms=[bogus]'
expect "threads: 1024"                        2 "threads is 1024" "$T" "${Q[@]}" --set threads=1024 --memory-report-only --set output.dir="$W/t1"
expect "--memory-report-only, dir is a file"  2 "$W/a_file is a file, not a directory" "$T" "${Q[@]}" --memory-report-only --set output.dir="$W/a_file"

# issue 40: refused commands leave the run directory byte for byte as it was; the user's files.
tree_sum() { (cd "$1" && find . -type f ! -name .packrat.lock -exec md5sum {} + | sort); }
# expect_unchanged NAME DIR SUM: DIR's files still have the checksums SUM (tree_sum before).
expect_unchanged() {
  tried=$((tried + 1))
  if [[ $(tree_sum "$2") == "$3" ]]; then ok=$((ok + 1)); printf 'ok    %-44s unchanged\n' "$1"
  else failed+=("$1"); printf 'FAIL  %-44s the run directory changed\n' "$1"; fi
}
cp -r "$W/earlier" "$W/r40"; sed -i "s|$W/earlier|$W/r40|" "$W/r40/config.yaml"
sed "s|$W/earlier|$W/r40|; s|arch: resnet20|arch: resnet32|" "$W/earlier/config.yaml" >"$W/other.yaml"
S=$(tree_sum "$W/r40")
expect "--resume with another seed"           2 "the config has seed 5" "$T" --resume "$W/r40" --set seed=5 --set train.epochs=2
expect_unchanged "... run directory as it was" "$W/r40" "$S"
expect "--resume with another model's config" 2 "a checkpoint of another model?" "$T" --resume "$W/r40" --config "$W/other.yaml" --set train.epochs=2
expect_unchanged "... run directory as it was" "$W/r40" "$S"
mv "$W/r40/metrics.csv" "$W/metrics.csv.away"
S=$(tree_sum "$W/r40")
expect "--resume with metrics.csv deleted"    2 "$W/r40/metrics.csv is missing" "$T" --resume "$W/r40" --set train.epochs=2
expect_unchanged "... run directory as it was" "$W/r40" "$S"
mv "$W/metrics.csv.away" "$W/r40/metrics.csv"
mkdir -p "$W/exp"; cp configs/quickstart.yaml "$W/exp/config.yaml"; S=$(tree_sum "$W/exp")
expect "config file in output.dir"            2 "$W/exp/config.yaml is your config" "$T" --config "$W/exp/config.yaml" --set output.dir="$W/exp"
expect_unchanged "... the config as it was"   "$W/exp" "$S"
mkdir -p "$W/text"; head -c 20000 README.md >"$W/text/a.txt"
expect "output.dir inside a text data.root"   2 "is inside data.root $W/text" "$T" "${Q[@]}" --set data.dataset=text --set data.root="$W/text" --set model.arch=gpt_tiny --set output.dir="$W/text/run"
expect "output.dir=~/x is \$HOME/x"            0 "wrote $W/home/x/memory_report.json" env HOME="$W/home" "$T" "${Q[@]}" --memory-report-only --set 'output.dir=~/x'
expect "--gradient-fidelity on FP32"          2 "keeps every saved tensor in FP32" "$T" "${Q[@]}" --gradient-fidelity 2 --set output.dir="$W/gf"
expect "--gradient-fidelity into a run"       2 "--gradient-fidelity does not write into it" "$T" "${Q[@]}" --gradient-fidelity 2 --set output.dir="$W/r40" --set saved_tensors.default=actnn-L3
expect "OMP_NUM_THREADS=100000, threads: 0"   2 "OMP_NUM_THREADS is 100000" env OMP_NUM_THREADS=100000 "$T" "${Q[@]}" --set threads=0 --memory-report-only --set output.dir="$W/t2"
truncate -s 10G "$W/huge.txt"
expect "a 10 GB text file"                    2 "$W/huge.txt' holds 10737418240 bytes, more than" "$T" "${Q[@]}" --set data.dataset=text --set data.root="$W/huge.txt" --set model.arch=gpt_tiny --set output.dir="$W/t3"
rm -f "$W/huge.txt"
expect "--find-max-batch 64G under ulimit -v" 2 "give at most" bash -c "ulimit -v 3145728; exec $T ${Q[*]} --find-max-batch 64G"

F=$BIN/fewbit
expect "fewbit table [-1e308, 1e308]"         2 "must be a finite number in [-100, 100]" "$F" table --fn gelu --bits 2 --A -1e308 --B 1e308
expect "fewbit table [-inf, inf]"             2 "must be a finite number in [-100, 100]" "$F" table --fn gelu --bits 2 --A -inf --B inf
expect "fewbit table --A nan"                 2 "must be a finite number" "$F" table --fn gelu --bits 2 --A nan
expect "fewbit table [-100, -99.9999999999999]" 2 "is narrower than 0.001" "$F" table --fn gelu --bits 2 --A -100 --B -99.9999999999999
expect "fewbit table [-1000, 1000]"           2 "must be a finite number in [-100, 100]" "$F" table --fn gelu --bits 4 --A -1000 --B 1000

echo "$tried hostile inputs tried, $ok got the expected exit code and message"
if ((${#failed[@]})); then
  printf 'not as expected: %s\n' "${failed[@]}"
  exit 1
fi
