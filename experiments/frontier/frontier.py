#!/usr/bin/env python3
"""The memory frontier (GACT's Figure 4) for one model, in one command: for every storage level
packrat has, in f32 and bf16, the largest batch whose training step fits a memory budget
(`trainer --find-max-batch`, the allocator's limit over every tagged byte) and the training
throughput at a grid of batch sizes up to it (`trainer --benchmark`), on synthetic inputs of the
dataset's shape. Writes, under OUT (default experiments/frontier/results/MODEL_SCALE):

  results.csv   one row per measurement: model,scale,device,budget,level,precision,kind,batch,
                img_per_s,peak_bytes,status,message (kind: max_batch or throughput; status: ok,
                refused (a level the device cannot run: its one-line reason in message) or failed)
  report.md     per level and precision: the largest batch and its factor over L0's, img/s at it
                and its ratio to L0's at L0's largest batch, beside the papers' figures
  frontier.png  throughput against batch, one line per level (gnuplot, when installed)

A rerun with the same OUT skips every measurement results.csv holds (resumable, as the sweeps);
--redo measures again what the run's levels and precisions hold (the other rows stay);
--retry-failed only their rows whose status is failed. Levels a device refuses (offload on the
CPU) are recorded as refused.

  experiments/frontier/frontier.py vit                      # --scale small: a budget and inputs for a 2-core CPU
  experiments/frontier/frontier.py resnet50 --levels L0,gact-L1,gact-CB1 --precisions f32
  experiments/frontier/frontier.py bert --scale paper --device cuda:0    # the papers' shapes, on a GPU
"""
import argparse, csv, json, math, os, re, shutil, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# model -> scale -> (trainer overrides, default budget). Synthetic inputs: no data file is read
# except the fortune files' class list for the BERT task.
MODELS = {
    "resnet50": {
        "small": (["--config", "configs/quickstart.yaml", "--set", "model.arch=resnet50", "--set", "model.stem=imagenet",
                   "--set", "data.dataset=cifar10", "--set", 'data.train_transforms=["resize(64)"]',
                   "--set", "conv_algorithm=direct"], "768M"),  # in 384M gact-L1's sensitivity refresh does not fit batch 1
        "paper": (["--config", "experiments/gact/base.yaml", "--set", "model.arch=resnet50", "--set", "model.stem=imagenet",
                   "--set", "data.dataset=image_folder", "--set", "data.root=/nonexistent", "--set", "data.height=224",
                   "--set", "data.width=224", "--set", "data.channels=3", "--set", "model.classes=1000",
                   "--set", "data.train_transforms=[]", "--set", "data.test_transforms=[]"], "16G"),
    },
    "bert": {
        # BERT-large's 24 layers at an eighth of its width (2 heads of 64): the depth is what makes
        # recomputation pay (a step keeps one layer's activations, not 24), as in GACT's BERT-large.
        "small": (["--config", "configs/bert_fortunes.yaml", "--set", "model.arch=bert_large", "--set",
                   "model.width_mult=0.125", "--set", "data.seq_len=256"], "384M"),
        "paper": (["--config", "configs/bert_fortunes.yaml", "--set", "model.arch=bert_large", "--set", "data.seq_len=512"],
                  "16G"),
    },
    "vit": {
        "small": (["--config", "configs/vit_cifar10.yaml", "--set", "data.train_transforms=[]"], "256M"),
        "paper": (["--config", "configs/vit_cifar10.yaml", "--set", "model.arch=vit_b_16", "--set", "data.height=224",
                   "--set", "data.width=224", "--set", 'data.train_transforms=["resize(224)"]'], "16G"),
    },
}

# level -> overrides. GACT's levels as they train: every tensor estimated at the first refresh
# (a benchmark runs it on 8 samples before its timed steps, as --find-max-batch's warm-up does and
# the plan's check), so that every row and the plan measure one allocation of the bits.
LEVELS = {
    "L0": ["saved_tensors={default: fp32, rules: []}"],
    "actnn-L1": ["saved_tensors={default: actnn-L1, rules: []}"],
    "actnn-L2": ["saved_tensors={default: actnn-L2, rules: []}"],
    "actnn-L3": ["saved_tensors={default: actnn-L3, rules: []}"],
    "actnn-L4": ["saved_tensors={default: actnn-L4, rules: []}"],
    "gact-L1": ["saved_tensors={default: gact-L1, rules: []}"],
    "gact-L2": ["saved_tensors={default: gact-L2, rules: []}"],
    "gact-CB1": ["saved_tensors={default: gact-CB1, rules: []}"],
    "gact-CB2": ["saved_tensors={default: gact-CB2, rules: []}"],
    "recompute": ["saved_tensors={default: fp32, rules: []}", "memory.recompute=[blocks]"],
    "offload": ["saved_tensors={default: fp32, rules: []}", "memory.offload={}"],
    # The planner (memory.plan: auto) in the same budget: at each batch it picks its own level.
    "plan-auto": ["memory.plan=auto"],
}

# The papers' batch factors over L0 (and throughput ratios where they give them), for the report.
ANCHORS = {
    ("resnet50", "gact-L2"): "GACT L2: 4.3x the batch at 0.56x L0's throughput (ResNet-50, Figure 4)",
    ("resnet50", "actnn-L4"): "ActNN L4 / L5: 6.6x the batch with L5's defragmentation (ResNet-50)",
    ("bert", "gact-L1"): "GACT L1: 5.3x (BERT-large, Figure 4)",
    ("bert", "gact-CB1"): "GACT CB1: 23.3x (BERT-large, Figure 4)",
    ("bert", "gact-CB2"): "GACT CB2: 24.7x (BERT-large, Figure 4)",
    ("vit", "gact-L2"): "GACT L2: 5.6x (Swin-tiny, Figure 4)",
}

FIELDS = ["model", "scale", "device", "budget", "level", "precision", "kind", "batch", "img_per_s", "peak_bytes",
          "status", "message"]


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def plan_check(text, chosen):
    """The plan's check of the option it chose, from the trainer's log: "; checked <measured>
    against <predicted> predicted (+x%)", and "; raced: <option> <img/s>, ..." when it timed
    several options at the batch; "" when it was not checked at this batch."""
    found, raced = "", ""
    for line in text.splitlines():
        m = re.search(r"plan: (.+) at batch \d+: measured peak (.+) against (.+) predicted \(([^)]+)\)", line)
        if m and m.group(1).split(" (", 1)[0] == chosen.split(" (", 1)[0]:
            found = f"; checked {m.group(2)} against {m.group(3)} predicted ({m.group(4)})"
        r = re.search(r"plan: raced at batch \d+: (.+); trains ", line)
        if r:
            raced = f"; raced: {r.group(1)}"
    return found + raced


def first_error(text):
    for line in text.splitlines():
        if "error" in line:
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1].strip() if lines else "no output"


class Frontier:
    def __init__(self, a):
        self.a = a
        self.base, default_budget = MODELS[a.model][a.scale]
        self.budget = a.budget or default_budget
        self.out = a.out or os.path.join(ROOT, "experiments", "frontier", "results", f"{a.model}_{a.scale}")
        os.makedirs(self.out, exist_ok=True)
        self.csv = os.path.join(self.out, "results.csv")
        self.rows = []
        if os.path.exists(self.csv):
            with open(self.csv, newline="") as f:
                self.rows = list(csv.DictReader(f))
        if a.redo:  # only what this run measures: the other levels' rows stay
            self.rows = [r for r in self.rows if not self.measures(r)]
        elif a.retry_failed:  # a failed measurement is no result: measure it again, keep the others
            self.rows = [r for r in self.rows if not (self.measures(r) and r["status"] == "failed")]
        self.scratch = tempfile.mkdtemp(prefix="packrat_frontier_")

    def measures(self, row):
        """Whether this run's model, scale, device, budget, levels and precisions take in `row`."""
        return ((row["model"], row["scale"], row["device"], row["budget"]) ==
                (self.a.model, self.a.scale, self.a.device, self.budget) and
                row["level"] in self.a.levels and row["precision"] in self.a.precisions)

    def key(self, level, precision, kind, batch=""):
        """A measurement's identity: a level's largest batch, or its throughput at one batch."""
        k = (self.a.model, self.a.scale, self.a.device, self.budget, level, precision, kind)
        return k + (str(batch),) if kind == "throughput" else k

    @staticmethod
    def key_of(row):
        k = tuple(row[f] for f in FIELDS[:7])
        return k + (row["batch"],) if row["kind"] == "throughput" else k

    def find(self, level, precision, kind, batch=""):
        k = self.key(level, precision, kind, batch)
        return next((r for r in self.rows if self.key_of(r) == k), None)

    def record(self, level, precision, kind, batch, img_per_s="", peak="", status="ok", message=""):
        row = dict(zip(FIELDS, self.key(level, precision, kind)[:7] + (str(batch), img_per_s, peak, status, message)))
        self.rows = [r for r in self.rows if self.key_of(r) != self.key_of(row)]
        self.rows.append(row)
        tmp = self.csv + ".tmp"  # written whole and renamed: an interrupted run leaves the last good file
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(self.rows)
        os.replace(tmp, self.csv)
        return row

    def trainer(self, level, precision, extra):
        cmd = [self.a.trainer] + self.base + ["--set", f"device={self.a.device}", "--set",
                                              f"output.dir={self.scratch}/run"]
        for s in LEVELS[level]:
            cmd += ["--set", s]
        if level == "plan-auto":
            cmd += ["--set", f"memory.budget={self.budget}"]
        if precision == "bf16":
            cmd += ["--set", "precision=bf16"]
        p = subprocess.run(cmd + extra, cwd=ROOT, capture_output=True, text=True)
        shutil.rmtree(os.path.join(self.scratch, "run"), ignore_errors=True)
        return p.returncode, p.stdout + p.stderr

    def max_batch(self, level, precision):
        done = self.find(level, precision, "max_batch")
        if done:
            return done
        rc, text = self.trainer(level, precision, ["--find-max-batch", self.budget])
        j = last_json(text)
        if rc == 0 and j and "max_batch_size" in j:
            chose = f"plan: {j['plan']}" if "plan" in j else ""
            return self.record(level, precision, "max_batch", j["max_batch_size"], peak=j.get("peak_bytes", ""),
                               message=chose)
        status = "refused" if rc == 2 else "failed"
        return self.record(level, precision, "max_batch", "", status=status, message=first_error(text))

    def throughput(self, level, precision, batch):
        done = self.find(level, precision, "throughput", batch)
        if done:
            return done
        rc, text = self.trainer(level, precision, ["--set", f"data.batch_size={batch}", "--benchmark", str(self.a.steps)])
        j = last_json(text)
        if rc == 0 and j and "img_per_s" in j:
            chose = next((l.split("chosen: ", 1)[1] for l in text.splitlines() if "chosen: " in l), "")
            return self.record(level, precision, "throughput", batch, f"{j['img_per_s']:.3f}", j.get("peak_bytes", ""),
                               message=f"plan: {chose}{plan_check(text, chose)}" if chose else "")
        return self.record(level, precision, "throughput", batch, status="failed", message=first_error(text))

    def run(self):
        for level in self.a.levels:
            for precision in self.a.precisions:
                m = self.max_batch(level, precision)
                if m["status"] != "ok":
                    print(f"{level} {precision}: {m['status']}: {m['message']}", flush=True)
                    continue
                top = int(m["batch"])
                grid = sorted({max(1, round(top * f)) for f in self.a.grid})
                for b in grid:
                    t = self.throughput(level, precision, b)
                    print(f"{level} {precision}: batch {b} of {top}: {t['img_per_s'] or t['message']} img/s", flush=True)
        self.report()
        self.plot()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def report(self):
        rows = [r for r in self.rows if (r["model"], r["scale"], r["device"], r["budget"]) ==
                (self.a.model, self.a.scale, self.a.device, self.budget)]
        maxes = {(r["level"], r["precision"]): r for r in rows if r["kind"] == "max_batch"}
        speed = {(r["level"], r["precision"], int(r["batch"])): float(r["img_per_s"])
                 for r in rows if r["kind"] == "throughput" and r["status"] == "ok"}
        l0 = maxes.get(("L0", "f32"))
        l0_batch = int(l0["batch"]) if l0 and l0["status"] == "ok" else None
        l0_speed = speed.get(("L0", "f32", l0_batch)) if l0_batch else None
        lines = [f"# Memory frontier: {self.a.model}, scale {self.a.scale}, budget {self.budget}, {self.a.device}", "",
                 f"`experiments/frontier/frontier.py {self.a.model} --scale {self.a.scale} --budget {self.budget} "
                 f"--device {self.a.device}`; {self.a.steps} timed steps a point; machine: {machine()}.", "",
                 "Batch factor: the level's largest batch over L0's (f32). Throughput: img/s (sequences/s) at "
                 "the level's largest batch, over L0's at L0's largest batch.", "",
                 "| level | precision | largest batch | x L0 | img/s there | x L0 | the papers |",
                 "|---|---|---|---|---|---|---|"]
        for (level, precision), r in sorted(maxes.items(), key=lambda kv: (list(LEVELS).index(kv[0][0]), kv[0][1])):
            anchor = ANCHORS.get((self.a.model, level), "")
            if r["status"] != "ok":
                lines.append(f"| {level} | {precision} | {r['status']}: {r['message'][:120]} | | | | {anchor} |")
                continue
            b = int(r["batch"])
            s = speed.get((level, precision, b))
            factor = f"{b / l0_batch:.2f}x" if l0_batch else ""
            ratio = f"{s / l0_speed:.2f}x" if s and l0_speed else ""
            if r["message"]:  # plan-auto: the level it chose for its largest batch
                anchor = (anchor + "; " if anchor else "") + r["message"]
            lines.append(f"| {level} | {precision} | {b} | {factor} | {s:.1f} | {ratio} | {anchor} |" if s else
                         f"| {level} | {precision} | {b} | {factor} | | | {anchor} |")
        with open(os.path.join(self.out, "report.md"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))

    def plot(self):
        if shutil.which("gnuplot") is None:
            print("frontier: gnuplot is not installed: no frontier.png (apt-get install gnuplot-nox)")
            return
        series = {}
        for r in self.rows:
            if r["kind"] == "throughput" and r["status"] == "ok" and r["budget"] == self.budget and r["device"] == self.a.device:
                series.setdefault(f"{r['level']} {r['precision']}", []).append((int(r["batch"]), float(r["img_per_s"])))
        if not series:
            return
        data = os.path.join(self.scratch, "frontier.dat")
        with open(data, "w") as f:
            for name, pts in series.items():
                f.write(f'"{name}"\n' + "".join(f"{b} {s}\n" for b, s in sorted(pts)) + "\n\n")
        plots = ", ".join(f"'{data}' index {i} using 1:2 with linespoints title '{name}'"
                          for i, name in enumerate(series))
        script = (f"set terminal pngcairo size 1000,650 noenhanced\nset output '{self.out}/frontier.png'\n"
                  f"set title 'Throughput against batch in {self.budget}: {self.a.model} ({self.a.scale}, {self.a.device})'\n"
                  "set logscale x 2\nset yrange [0:*]\nset xlabel 'batch'\nset ylabel 'img/s'\nset key outside right\nset grid\n"
                  f"plot {plots}\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def machine():
    name = "?"
    try:
        with open("/proc/cpuinfo") as f:
            name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores, {name}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--scale", choices=["small", "paper"], default="small")
    ap.add_argument("--budget", help="bytes, with a unit (384M, 16G); default: the scale's")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--levels", default=",".join(LEVELS), help="comma-separated, of: " + ", ".join(LEVELS))
    ap.add_argument("--precisions", default="f32,bf16", help="f32, bf16 or both")
    ap.add_argument("--grid", default="0.125,0.25,0.5,1", help="fractions of each level's largest batch to time")
    ap.add_argument("--steps", type=int, default=2, help="timed steps a point")
    ap.add_argument("--out")
    ap.add_argument("--trainer", default=os.path.join(ROOT, "build", "bin", "trainer"))
    ap.add_argument("--redo", action="store_true", help="measure again what results.csv holds of --levels and --precisions")
    ap.add_argument("--retry-failed", action="store_true", help="measure again only those of their rows that failed")
    a = ap.parse_args()
    a.levels = [l for l in a.levels.split(",") if l]
    unknown = [l for l in a.levels if l not in LEVELS]
    if unknown:
        sys.exit(f"frontier: unknown level(s) {', '.join(unknown)}; levels: {', '.join(LEVELS)}")
    a.precisions = [p for p in a.precisions.split(",") if p]
    if any(p not in ("f32", "bf16") for p in a.precisions):
        sys.exit("frontier: --precisions takes f32 and/or bf16")
    a.grid = sorted({float(x) for x in a.grid.split(",")})
    if any(not 0 < x <= 1 for x in a.grid):
        sys.exit("frontier: --grid takes fractions in (0, 1]")
    if not os.access(a.trainer, os.X_OK):
        sys.exit(f"frontier: {a.trainer} not found: build it (scripts/build.sh)")
    Frontier(a).run()


if __name__ == "__main__":
    main()
