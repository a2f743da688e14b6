#!/usr/bin/python3
"""Our GPT-2 trainer checked against PyTorch, an implementation nobody here wrote.

Writes a tiny random llm.c model file (v3, fp32) and an llm.c token shard of random tokens, runs our
trainer on them (tools/reference_run.cu) and the same GPT-2 written here in PyTorch, and
compares: the loss of step 1, every parameter gradient of step 1, the losses and gradient
norms of STEPS AdamW steps (some but not all of them clipped), and every parameter after the
last update. The same again in bf16 (PyTorchBf16.*): our --dtype bf16 against PyTorch with bf16
parameters and fp32 master weights, within tolerances that bf16's 8 significant bits set. Both
once with the materialised attention (PyTorch.*, PyTorchBf16.*) and once with the fused one,
./train's default (PyTorchFused.*, PyTorchFusedBf16.*), within the same tolerances; the fp32 run
once more on 2 tensor-parallel ranks (PyTorchTp2.*, under MPIRUN, default mpirun). And one
step of microbatches of different lengths with padded, masked positions (PyTorchVariableLength.*):
its loss, the mean over the real targets, and every gradient (reference_run --variable-length). Our fp32
products run in full fp32 there (reference_run's handle keeps cuBLAS's default math mode, as
./train --no-tf32), as PyTorch's CPU matmul does: TF32's 10-bit inputs would need other tolerances.
Run by Debian's /usr/bin/python3 with python3-torch:
    /usr/bin/python3 tests/pytorch_check.py [--gtest_filter=PATTERN]
REFERENCE_RUN names our program (default build/cpu/tools/reference_run). One line per
check, then "tests: N passed, M failed" (exit status 1 on a failure), as tools/run_tests.sh
expects. Without torch it says that it skipped and counts nothing, unless CI=true: there a
missing torch is one failure.
"""
import math
import os
import subprocess
import sys
import tempfile

from check_runner import run_checks, selected_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The model, data and optimizer: small enough for the CPU build, every part exercised
# (2 layers, 2 heads, T < maxT, V padded to Vp, gradient accumulation, weight decay, clipping).
L, NH, C, MAX_T, V = 2, 2, 32, 20, 50
VP = (V + 127) // 128 * 128
B, T, MICROBATCHES, STEPS = 2, 16, 2, 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 3e-3, 0.9, 0.95, 1e-8, 0.1
# Between the run's gradient norms (1.127 to 1.585), so that steps with and without clipping
# are both checked (steps 1 and 7 to 10 clip), and far from every norm (the nearest, 1.380 and
# 1.421, are 1.5% away; the implementations' norms agree to NORM_TOLERANCE, 1e-4 relative), so
# that both clip in the same steps.
GRAD_CLIP = 1.4
SEED = 20240326

# Tolerances of the issue. fp32 sums of at most a few thousand terms differ by ~1e-6 of their
# magnitude between two orders of summation, so both bounds leave a margin of about 100.
GRADIENT_TOLERANCE = 1e-4  # max |ours - torch| over a tensor, relative to the tensor's max |torch|
LOSS_TOLERANCE = 1e-4  # absolute, per step
NORM_TOLERANCE = 1e-4  # relative, per step: the clipping factor follows from the norm
# max |ours - torch| over a tensor after the last update, relative to the largest distance the
# updates moved that tensor (the initial values are the same bits in both; the updates move a
# tensor by about 3e-2). AdamW divides by sqrt(v), so an element whose gradient is small against
# its history carries the fp32 differences of its gradient (~1e-6 relative) into its moves
# enlarged: measured 5e-7 to 3.8e-5 of the moves with the materialised attention and up to 7.0e-5
# (qkvw) with the fused one, whose step-1 gradients are as close as the materialised one's (the largest in the matrices); a 1% error in
# the clipping factor gives 3e-3 to 9e-3, weight decay left out 5e-4 to 1e-2.
PARAMETER_TOLERANCE = 1e-4

# bf16 tolerances. A value stored in bf16 is off by up to 2^-9 of itself (round to nearest, 8
# significant bits), 2^-9 / sqrt(3) at one standard deviation. In this model (L = 2) the longest
# chain from a weight to the loss stores K = 8 L + 6 = 22 values in the forward and as many in the
# backward, plus a rounding of each microbatch's gradient into the bf16 sum: 2 K + 2 = 46, whose
# independent roundings add in quadrature. Ours and PyTorch's round at similar but not the same
# places, so the two runs' errors are independent: sqrt(2) 7.7e-3 of a gradient's scale at one
# standard deviation, and the bound is 5 of them (measured 1.3e-2 at most, ln1w).
BF16_GRADIENT_TOLERANCE = 5 * math.sqrt(2) * math.sqrt(46) * 2 ** -9 / math.sqrt(3)  # 5.4e-2
# The norm is a root of fp32 sums of squares of those gradients: its relative difference is at
# most the gradients' (measured 1.6e-2 at step 10, the parameters having drifted apart by then).
BF16_NORM_TOLERANCE = BF16_GRADIENT_TOLERANCE
# The loss (fp32, from bf16 logits) within one bf16 ulp of itself, relative: 2^-8 (measured 2.3e-5
# at step 1, 5e-4 at most over the ten steps). Our parameters are rounded stochastically from the
# master weights and PyTorch's to nearest (a difference by design: up to one bf16 ulp each).
BF16_LOSS_TOLERANCE = 2 ** -8
# After the last update, our master weights against PyTorch's, per tensor, by the root mean square
# of the difference (the key bias left out, as above): no farther than twice PyTorch's bf16 run is
# from its fp32 run. Each update moves a parameter by about the learning rate in the direction of
# its gradient's running sign, and where bf16's noise (1% of a tensor's scale, above) decides that
# sign two bf16 runs move apart by up to two learning rates a step; a max over elements would
# measure that noise alone. Measured 0.03 to 0.95 of PyTorch's own spread; a 10% larger learning
# rate gives 2.3.
BF16_PARAMETER_SPREADS = 2

# A step of microbatches of different lengths with padding (issue 34; our side is reference_run
# --variable-length, the model itself): per microbatch, its sequences' lengths. Each microbatch's T
# is its longest (16, 12, 7 and 7, all below MAX_T), its shorter rows padded at their end with input 0
# and target -1; the loss is the mean over the 62 real targets. fp32, with the tolerances above.
VARIABLE_LENGTHS = [[16, 9], [5, 12], [3, 7], [7, 3]]

# llm.c's tensors in file order, with shapes (wte with the padded vocabulary).
SHAPES = [
    ("wte", (VP, C)), ("wpe", (MAX_T, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
    ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
    ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
    ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,)),
]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # GPT-2's matrices and embeddings


# Our runs by family prefix: (dtype, attention, tensor-parallel ranks). ./train's default
# attention is fused; the materialised one is checked as well, against the same PyTorch runs and
# tolerances (the two attentions compute the same function: the fused kernel's sums run in another
# order). PyTorchTp2 runs the model on 2 tensor-parallel ranks (issue 33; reference_run --tp 2
# under mpirun -np 2: 1 head, 2C hidden columns and 64 rows of wte a rank), against the same
# PyTorch run and the fp32 tolerances above. A row-parallel layer adds 2 partial sums of C / 2 or
# 2C products, a column-parallel input gradient 2 partial sums, the loss's sum of exponentials 2
# of 64 rows: one process's sums of the same terms in another order, each within K u of its terms'
# magnitude (K <= VP = 128 terms, u = 2^-24: 7.6e-6), still a margin of 13 below the 1e-4 bounds.
# Measured, CPU build, 2026-11-27: gradients within 2.8e-7 of their tensor's scale (tp 1: 2.3e-7), losses
# within 1.7e-7, norms 2.3e-7 relative, parameters within 3.3e-5 of their moves (tp 1: 3.8e-5).
OUR_RUNS = {"PyTorch": ("fp32", "materialized", 1), "PyTorchBf16": ("bf16", "materialized", 1),
            "PyTorchFused": ("fp32", "fused", 1), "PyTorchFusedBf16": ("bf16", "fused", 1),
            "PyTorchTp2": ("fp32", "materialized", 2)}


def fp32_names(family):
    return ([family + ".Step1Loss"] + [family + ".Step1Gradient/" + name for name, _ in SHAPES] +
            [family + ".AdamWLoss/step%d" % step for step in range(1, STEPS + 1)] +
            [family + ".GradNormBeforeClipping", family + ".ClippingInSomeButNotAllSteps"] +
            [family + ".ParametersAfterLastUpdate/" + name for name, _ in SHAPES])


def bf16_names(family):
    return ([family + ".Step1Loss"] + [family + ".Step1Gradient/" + name for name, _ in SHAPES] +
            [family + ".AdamWLoss/step%d" % step for step in range(1, STEPS + 1)] +
            [family + ".GradNormBeforeClipping"] +
            [family + ".MasterWeightsAfterLastUpdate/" + name for name, _ in SHAPES])


def check_names():
    return (fp32_names("PyTorch") + bf16_names("PyTorchBf16") + fp32_names("PyTorchFused") +
            bf16_names("PyTorchFusedBf16") + fp32_names("PyTorchTp2") +
            ["PyTorchVariableLength.StepLoss"] + ["PyTorchVariableLength.Gradient/" + name for name, _ in SHAPES])


def padded(np, name, values):
    """torch's tensor in llm.c's shape: torch's wte has the model's V rows, llm.c's the Vp of the
    padded vocabulary, whose padding rows have gradient and value 0."""
    return np.concatenate([values, np.zeros((VP - V, C), np.float32)]) if name == "wte" else values


def without_key_bias(np, name, values):
    """The parameters compared after the last update: all but the key bias, whose gradient is 0
    in exact arithmetic (q . b_k is added to every score of a query's row, and the softmax
    ignores it), so that both runs see fp32 rounding noise (~1e-11) there, which AdamW scales by
    1 / eps into moves of ~1e-5 that differ from run to run."""
    return np.delete(values.reshape(L, 3, C), 1, axis=1) if name == "qkvb" else values


def random_parameters(np, rng):
    """GPT-2-like values, but LayerNorm weights and biases away from 1 and 0 so that their
    gradients and their effect on the others are checked too. Padded wte rows are 0 (llm.c)."""
    tensors = {}
    for name, shape in SHAPES:
        if name in ("ln1w", "ln2w", "lnfw"):
            tensors[name] = 1 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("b"):
            tensors[name] = 0.02 * rng.standard_normal(shape)
        else:
            scale = 1 / math.sqrt(2 * L) if name in ("attprojw", "fcprojw") else 1
            tensors[name] = 0.02 * scale * rng.standard_normal(shape)
    tensors["wte"][V:] = 0
    return {name: tensor.astype(np.float32) for name, tensor in tensors.items()}


def write_model_file(np, path, tensors):
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, MAX_T, V, L, NH, C, VP]
    with open(path, "wb") as file:
        file.write(header.tobytes())
        for name, _ in SHAPES:
            file.write(tensors[name].tobytes())


def write_token_shard(np, path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as file:
        file.write(header.tobytes())
        file.write(tokens.astype(np.uint16).tobytes())


def gpt_loss(torch, p, tokens, targets):
    """GPT-2: learned positions, pre-LN blocks, causal attention, tanh GELU, the lm head tied
    to wte (V rows: the padding is not part of the model). Per-token cross-entropy (B, T), in fp32
    from the logits in the parameters' type, as our classifier computes it; 0 where the target is -1
    (a padded position)."""
    F = torch.nn.functional
    hs = C // NH
    B, T = tokens.shape
    x = p["wte"][tokens] + p["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        q, k, v = F.linear(h, p["qkvw"][l], p["qkvb"][l]).split(C, dim=-1)
        q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        attention = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (attention @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, p["attprojw"][l], p["attprojb"][l])
        h = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        h = F.gelu(F.linear(h, p["fcw"][l], p["fcb"][l]), approximate="tanh")
        x = x + F.linear(h, p["fcprojw"][l], p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = F.linear(x, p["wte"]).float()  # (B, T, V)
    return F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T), reduction="none",
                           ignore_index=-1).view(B, T)


def torch_run(torch, np, tensors, tokens, bf16):
    """Our training loop in PyTorch: microbatch k reads tokens [k B T, k B T + B T + 1) (wrapping),
    each microbatch's summed loss scaled by 1 / (B T microbatches), clipping, AdamW. In bf16, mixed
    precision written out: the optimizer's parameters are fp32 master weights (the model file's
    values rounded to bf16 and widened, as ours start); each step's forwards and backwards run on
    their rounding to nearest bf16 (ours round stochastically), the bf16 gradients accumulate over
    the microbatches in bf16, and their fp32 values are clipped and applied to the master weights."""
    master = {name: torch.tensor(tensor) for name, tensor in tensors.items()}
    master["wte"] = torch.tensor(tensors["wte"][:V])
    if bf16:
        master = {name: tensor.bfloat16().float() for name, tensor in master.items()}
    p = {name: tensor.requires_grad_() for name, tensor in master.items()}
    decayed = [p[name] for name, _ in SHAPES if name in DECAYED]
    others = [p[name] for name, _ in SHAPES if name not in DECAYED]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY},
                                   {"params": others, "weight_decay": 0.0}], lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses, norms, step1_gradient = [], [], None
    microbatch = 0
    for step in range(1, STEPS + 1):
        optimizer.zero_grad(set_to_none=False)
        model = {name: p[name].detach().bfloat16().requires_grad_() for name, _ in SHAPES} if bf16 else p
        loss_sum = 0.0
        for _ in range(MICROBATCHES):
            window = tokens[(microbatch * B * T + np.arange(B * T + 1)) % len(tokens)].astype(np.int64)
            inputs = torch.tensor(window[:-1]).view(B, T)
            targets = torch.tensor(window[1:]).view(B, T)
            token_losses = gpt_loss(torch, model, inputs, targets)
            (token_losses.sum() / (B * T * MICROBATCHES)).backward()
            loss_sum += token_losses.mean().item()
            microbatch += 1
        losses.append(loss_sum / MICROBATCHES)
        if bf16:
            for name, _ in SHAPES:
                p[name].grad = model[name].grad.float()
        if step == 1:
            step1_gradient = {name: p[name].grad.detach().numpy().copy() for name, _ in SHAPES}
        all_parameters = [p[name] for name, _ in SHAPES]
        if GRAD_CLIP > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(all_parameters, GRAD_CLIP)))
        else:
            norms.append(float(torch.norm(torch.stack([t.grad.norm() for t in all_parameters]))))
        optimizer.step()
    final = {name: p[name].detach().numpy().copy() for name, _ in SHAPES}
    return losses, norms, step1_gradient, final


def our_run(np, model_path, tokens_path, output_path, dtype, attention, tp):
    """reference_run's numbers: in bf16 its gradients are the bf16 ones widened and its parameters
    the fp32 master weights. At tp > 1 under MPIRUN (default mpirun) -np tp."""
    program = os.environ.get("REFERENCE_RUN", os.path.join(ROOT, "build/cpu/tools/reference_run"))
    launcher = os.environ.get("MPIRUN", "mpirun").split() + ["-np", str(tp)] if tp > 1 else []
    command = launcher + [program] + (["--tp", str(tp)] if tp > 1 else []) + [model_path, tokens_path, output_path] + [
        str(x) for x in (B, T, MICROBATCHES, STEPS, LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP, dtype, attention)]
    subprocess.run(command, check=True)
    sizes = [int(np.prod(shape)) for _, shape in SHAPES]
    with open(output_path, "rb") as file:
        gradient = np.frombuffer(file.read(4 * sum(sizes)), dtype=np.float32)
        losses = np.frombuffer(file.read(8 * STEPS), dtype=np.float64)
        norms = np.frombuffer(file.read(8 * STEPS), dtype=np.float64)
        parameters = np.frombuffer(file.read(4 * sum(sizes)), dtype=np.float32)
        if file.read(1) or len(parameters) != sum(sizes):
            raise RuntimeError(output_path + ": not the size reference_run's output should have")
    offsets = np.cumsum([0] + sizes)
    by_tensor = lambda values: {name: values[offsets[i]:offsets[i + 1]].reshape(shape)
                                for i, (name, shape) in enumerate(SHAPES)}
    return list(losses), list(norms), by_tensor(gradient), by_tensor(parameters)


def padded_microbatches(np, rng):
    """VARIABLE_LENGTHS' microbatches of random tokens: (inputs, targets) pairs of shape (B, T)."""
    microbatches = []
    for lengths in VARIABLE_LENGTHS:
        T = max(lengths)
        inputs, targets = np.zeros((len(lengths), T), np.int32), np.full((len(lengths), T), -1, np.int32)
        for row, length in enumerate(lengths):
            inputs[row, :length] = rng.integers(0, V, size=length)
            targets[row, :length] = rng.integers(0, V, size=length)
        microbatches.append((inputs, targets))
    return microbatches


def our_variable_length_step(np, model_path, microbatches, directory):
    """reference_run --variable-length's gradient (by tensor) and loss."""
    batches_path, output_path = os.path.join(directory, "microbatches.bin"), os.path.join(directory, "step.bin")
    with open(batches_path, "wb") as file:
        for inputs, targets in microbatches:
            file.write(np.array(inputs.shape, np.int32).tobytes() + inputs.tobytes() + targets.tobytes())
    program = os.environ.get("REFERENCE_RUN", os.path.join(ROOT, "build/cpu/tools/reference_run"))
    subprocess.run([program, "--variable-length", model_path, batches_path, output_path], check=True)
    sizes = [int(np.prod(shape)) for _, shape in SHAPES]
    with open(output_path, "rb") as file:
        gradient = np.frombuffer(file.read(4 * sum(sizes)), dtype=np.float32)
        loss = np.frombuffer(file.read(8), dtype=np.float64)
        if file.read(1) or len(loss) != 1:
            raise RuntimeError(output_path + ": not the size reference_run --variable-length writes")
    offsets = np.cumsum([0] + sizes)
    return {name: gradient[offsets[i]:offsets[i + 1]].reshape(shape) for i, (name, shape) in enumerate(SHAPES)}, loss[0]


def variable_length_results(torch, np, tensors, microbatches, ours):
    """PyTorch's step: each microbatch's summed loss (padding ignored) over the step's real targets."""
    p = {name: torch.tensor(tensor).requires_grad_() for name, tensor in tensors.items()}
    p["wte"] = torch.tensor(tensors["wte"][:V]).requires_grad_()
    real = sum(int((targets != -1).sum()) for _, targets in microbatches)
    loss = 0.0
    for inputs, targets in microbatches:
        token_losses = gpt_loss(torch, p, torch.tensor(inputs).long(), torch.tensor(targets).long())
        (token_losses.sum() / real).backward()
        loss += token_losses.sum().item() / real
    our_gradient, our_loss = ours
    difference = abs(our_loss - loss)
    results = {"PyTorchVariableLength.StepLoss": (difference <= LOSS_TOLERANCE, "ours %.7f torch %.7f |diff| %.1e "
                                                  "<= %.0e (%d real targets)" % (our_loss, loss, difference,
                                                                                 LOSS_TOLERANCE, real))}
    for name, _ in SHAPES:
        results["PyTorchVariableLength.Gradient/" + name] = gradient_verdict(
            np, our_gradient[name], padded(np, name, p[name].grad.numpy()), GRADIENT_TOLERANCE)
    return results


def fp32_results(family, np, tensors, ours, theirs):
    """The fp32 checks' verdicts by name."""
    our_losses, our_norms, our_gradient, our_final = ours
    torch_losses, torch_norms, torch_gradient, torch_final = theirs
    results = {}
    difference = abs(our_losses[0] - torch_losses[0])
    results[family + ".Step1Loss"] = (difference <= LOSS_TOLERANCE, "ours %.7f torch %.7f |diff| %.1e <= %.0e" % (
        our_losses[0], torch_losses[0], difference, LOSS_TOLERANCE))
    for name, _ in SHAPES:
        results[family + ".Step1Gradient/" + name] = gradient_verdict(
            np, our_gradient[name], padded(np, name, torch_gradient[name]), GRADIENT_TOLERANCE)
    for step in range(1, STEPS + 1):
        difference = abs(our_losses[step - 1] - torch_losses[step - 1])
        results[family + ".AdamWLoss/step%d" % step] = (
            difference <= LOSS_TOLERANCE,
            "ours %.7f torch %.7f |diff| %.1e <= %.0e" % (
                our_losses[step - 1], torch_losses[step - 1], difference, LOSS_TOLERANCE))
    results[family + ".GradNormBeforeClipping"] = norm_verdict(np, our_norms, torch_norms, NORM_TOLERANCE)
    clipped = [step for step, norm in enumerate(torch_norms, 1) if norm > GRAD_CLIP]
    our_clipped = [step for step, norm in enumerate(our_norms, 1) if norm > GRAD_CLIP]
    results[family + ".ClippingInSomeButNotAllSteps"] = (
        0 < len(clipped) < STEPS and our_clipped == clipped,
        "steps %s of %d clip at %.2f, ours %s (norms %s)" % (
            clipped, STEPS, GRAD_CLIP, our_clipped, " ".join("%.3f" % norm for norm in torch_norms)))
    for name, _ in SHAPES:
        expected, initial, final = (without_key_bias(np, name, values) for values in (
            padded(np, name, torch_final[name]), tensors[name], our_final[name]))
        moved = float(np.abs(expected - initial).max())
        difference = float(np.abs(final - expected).max())
        results[family + ".ParametersAfterLastUpdate/" + name] = (
            difference <= PARAMETER_TOLERANCE * moved,
            "max |diff| %.2e = %.1e of the updates' max |move| %.2e (bound %.0e)" % (
                difference, difference / moved, moved, PARAMETER_TOLERANCE))
    return results


def gradient_verdict(np, ours, expected, tolerance):
    largest = float(np.abs(expected).max())
    difference = float(np.abs(ours - expected).max())
    return (difference <= tolerance * largest, "max |diff| %.2e = %.1e of max |grad| %.2e (bound %.1e)" % (
        difference, difference / largest, largest, tolerance))


def norm_verdict(np, ours, theirs, tolerance):
    # np.max, not max(): a NaN anywhere makes the measure NaN, and NaN <= bound is false.
    relative = float(np.max(np.abs(np.array(ours) - theirs) / theirs))
    return relative <= tolerance, "max relative diff %.1e <= %.1e over %d steps" % (relative, tolerance, STEPS)


def bf16_results(family, np, tensors, ours, theirs, fp32_final):
    """The bf16 checks' verdicts by name; fp32_final is PyTorch's fp32 run's, the measure of how far
    bf16 itself moves the parameters."""
    our_losses, our_norms, our_gradient, our_final = ours
    torch_losses, torch_norms, torch_gradient, torch_final = theirs
    results = {}
    for step in range(1, STEPS + 1):
        difference = abs(our_losses[step - 1] - torch_losses[step - 1])
        bound = BF16_LOSS_TOLERANCE * torch_losses[step - 1]
        verdict = (difference <= bound, "ours %.6f torch %.6f |diff| %.1e <= %.1e (2^-8 of the loss)" % (
            our_losses[step - 1], torch_losses[step - 1], difference, bound))
        results[family + ".AdamWLoss/step%d" % step] = verdict
        if step == 1:
            results[family + ".Step1Loss"] = verdict
    for name, _ in SHAPES:
        results[family + ".Step1Gradient/" + name] = gradient_verdict(
            np, our_gradient[name], padded(np, name, torch_gradient[name]), BF16_GRADIENT_TOLERANCE)
    results[family + ".GradNormBeforeClipping"] = norm_verdict(np, our_norms, torch_norms, BF16_NORM_TOLERANCE)
    rms = lambda values: float(np.sqrt(np.mean(np.square(values))))
    for name, _ in SHAPES:
        expected, final, fp32 = (without_key_bias(np, name, values) for values in (
            padded(np, name, torch_final[name]), our_final[name], padded(np, name, fp32_final[name])))
        difference, spread = rms(final - expected), rms(expected - fp32)
        results[family + ".MasterWeightsAfterLastUpdate/" + name] = (
            difference <= BF16_PARAMETER_SPREADS * spread,
            "rms diff %.2e = %.2f of torch's bf16-to-fp32 spread %.2e (bound %d)" % (
                difference, difference / spread, spread, BF16_PARAMETER_SPREADS))
    return results


def main():
    names = selected_names(check_names())
    if not names:
        print("tests: 0 passed, 0 failed")
        return 0
    try:
        import numpy as np
        import torch
    except ImportError as error:
        problem = "%s cannot import torch or numpy (%s); install Debian's python3-torch" % (sys.executable, error)
        if os.environ.get("CI") == "true":
            print("FAILED PyTorch cross-check: %s (CI=true: its %d checks must run)" % (problem, len(names)))
            print("tests: 0 passed, 1 failed")
            return 1
        for name in names:
            print("SKIPPED %s: %s" % (name, problem))
        print("tests: 0 passed, 0 failed")
        return 0

    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    tensors = random_parameters(np, rng)
    # A random pattern repeated: learnable, so the loss falls and a wrong update shows in it.
    pattern = rng.integers(0, V, size=37)
    tokens = np.resize(pattern, STEPS * MICROBATCHES * B * T + 1)
    microbatches = padded_microbatches(np, rng)
    with tempfile.TemporaryDirectory() as directory:
        model_path, tokens_path = os.path.join(directory, "model.bin"), os.path.join(directory, "tokens.bin")
        write_model_file(np, model_path, tensors)
        write_token_shard(np, tokens_path, tokens)
        try:
            # Only the runs a selected check needs.
            families = {name.split(".")[0] for name in names}
            ours = {family: our_run(np, model_path, tokens_path, os.path.join(directory, "out.bin"), *OUR_RUNS[family])
                    for family in sorted(families & OUR_RUNS.keys())}
            ours_variable_length = our_variable_length_step(np, model_path, microbatches, directory)
        except (OSError, subprocess.CalledProcessError, RuntimeError) as error:
            print("FAILED PyTorch cross-check: our reference run did not finish: %s" % error)
            print("tests: 0 passed, %d failed" % len(names))
            return 1
    torch_fp32 = torch_run(torch, np, tensors, tokens, False)
    torch_bf16 = torch_run(torch, np, tensors, tokens, True)
    results = {}
    for family, (dtype, _, _) in OUR_RUNS.items():
        if family in ours and dtype == "fp32":
            results.update(fp32_results(family, np, tensors, ours[family], torch_fp32))
        elif family in ours:
            results.update(bf16_results(family, np, tensors, ours[family], torch_bf16, torch_fp32[3]))
    results.update(variable_length_results(torch, np, tensors, microbatches, ours_variable_length))
    return run_checks(names, results.get)


if __name__ == "__main__":
    sys.exit(main())
