"""Run by test_distributed_frontend.py through the launcher: nn.Graph training of an MLP and a
small GPT on a layout given by --layout gives the losses and weights of the same graph on one
device, which each process computes itself first (a local graph on its own rank). With --eager
the laid-out model trains eagerly instead (global autograd, flow.optim stepping global
parameters; --clip adds clip_grad_norm_, --dropout a dropout on each block's attention
weights, attention output and MLP output, and either compares with the same eager loop on one
device)."""

import argparse
import sys

import numpy as np

import oneflowlike as flow
import oneflowlike.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["mlp", "gpt"], required=True)
parser.add_argument("--layout", required=True)  # single, dp2, dp2zero, tp2, pp2, dp2tp2
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")  # placements' type
parser.add_argument("--eager", action="store_true", help="train eagerly, not through nn.Graph")
parser.add_argument("--clip", type=float, default=0.0, help="eager: clip_grad_norm_ to this")
parser.add_argument("--dropout", type=float, default=0.0, help="eager: the GPT blocks' dropout")
args = parser.parse_args()
rank = flow.env.get_rank()
S0, S1, B = flow.sbp.split(0), flow.sbp.split(1), flow.sbp.broadcast
MICRO = 4 if args.layout == "pp2" else 1
V, T, C, H, BATCH = 16, 8, 16, 2, 8


def to_stage(x, module):
    """Eager pipeline stages: the activation moved to the placement of the next stage's
    parameters, as a user of eager global tensors writes it (LiBai's to_global between layers);
    its gradient comes back through the same to_global. Graphs place stages with set_stage."""
    weight = next(module.parameters())
    if not (args.eager and args.layout == "pp2" and getattr(weight, "is_global", False)):
        return x
    return x.to_global(placement=weight.placement, sbp=x.sbp)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(16, 4)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.fc2(to_stage(self.act(self.fc1(x)), self.fc2)), y)

    def stages(self):
        return [self.fc1], [self.fc2]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        # --dropout: the attention weights' and output's too (p 0: no draw).
        self.attn = nn.CausalSelfAttention(C, H, T, dropout=args.dropout)
        self.ln_2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.proj = nn.Linear(4 * C, C)
        self.drop = nn.Dropout(args.dropout)  # p 0: the identity, no draw

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.drop(self.proj(self.gelu(self.fc(self.ln_2(x)))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h0 = Block()
        self.h1 = Block()
        self.ln_f = nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, idx, targets):
        pos = flow.arange(0, T)
        if idx.is_global:  # eager on global tensors: the positions are global too
            pos = flow.arange(0, T, placement=idx.placement,
                              sbp=(B,) * len(idx.placement.hierarchy))
        x = self.wte(idx) + self.wpe(pos)
        x = self.h1(to_stage(self.h0(x), self.h1))
        logits = self.head(self.ln_f(x))
        return self.loss(logits.reshape(-1, V), targets.reshape(-1))

    def stages(self):
        return [self.wte, self.wpe, self.h0], [self.h1, self.ln_f, self.head]


def make_model():
    flow.manual_seed(7)
    return Mlp() if args.model == "mlp" else Gpt()


def batches():
    rng = np.random.default_rng(11)
    out = []
    for _ in range(args.steps):
        if args.model == "mlp":
            x = rng.standard_normal((BATCH, 6)).astype(np.float32)
            y = rng.integers(0, 4, BATCH).astype(np.int64)
        else:
            x = rng.integers(0, V, (BATCH, T)).astype(np.int64)
            y = rng.integers(0, V, (BATCH, T)).astype(np.int64)
        out.append((x, y))
    return out


def make_optimizer(model):
    # The GPT trains with SGD: the key bias's gradient is zero up to rounding (softmax ignores a
    # constant added to every score), and Adam's normalisation would turn each layout's different
    # rounding into lr-sized steps.
    if args.model == "mlp":
        return flow.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    return flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def eager_step(model, opt, x, y, after_backward=None):
    opt.zero_grad()
    loss = model(x, y)
    loss.backward()
    if after_backward is not None:
        after_backward()
    if args.clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    opt.step()
    return loss


class Train(nn.Graph):
    def __init__(self, model, placements=None, micro=1):
        super().__init__()
        self.model = model
        self.add_optimizer(make_optimizer(model))
        self.config.set_gradient_accumulation_steps(micro)
        if placements is not None:
            for modules, p in zip(model.stages(), placements):
                for i, m in enumerate(modules):
                    self.set_stage(m, placements.index(p), p)

    def build(self, x, y):
        loss = self.model(x, y)
        loss.backward()
        return loss


def check_partial_gradient():
    """Note [Eager global autograd]: under DP a broadcast parameter used under split data gets a
    partial-sum gradient, laid out as the parameter (all-reduced) when .grad is read."""
    if args.layout != "dp2":
        return
    first = next(iter(model_under_test.parameters()))
    assert first.sbp == (B,) and first._grad.sbp == (flow.sbp.partial_sum,), first._grad.sbp
    assert first.grad.sbp == (B,) and first._grad.sbp == (B,)


def mean_loss(out):
    value = out.numpy() if hasattr(out, "numpy") else out
    return float(np.mean(value))


def main():
    global data_placement, target_placement
    data = batches()
    # One device: a local graph on this process's own rank.
    ref_model = make_model()
    ref = Train(ref_model, micro=MICRO)
    ref_losses = [mean_loss(ref(flow.tensor(x), flow.tensor(y)).numpy()) for x, y in data]
    ref_weights = {k: v.numpy() for k, v in ref.state_dict().items() if flow.is_tensor(v)}
    if args.eager and (args.clip > 0 or args.dropout > 0):
        # With clipping or dropout the reference is the same eager loop on one device (it draws
        # the same masks: Note [Eager global dropout]).
        ref_model = make_model()
        ref_opt = make_optimizer(ref_model)
        ref_losses = [mean_loss(eager_step(ref_model, ref_opt, flow.tensor(x), flow.tensor(y)))
                      for x, y in data]
        ref_weights = {f"model.{k}": v.numpy() for k, v in ref_model.state_dict().items()}

    model = make_model()
    data_placement = None
    target_placement = None
    if args.layout == "single":
        graph = Train(model, micro=MICRO)
    elif args.layout == "dp2":
        data_placement = flow.placement(args.device, ranks=[0, 1])
        model.to_global(data_placement, B)
        graph = Train(model)
    elif args.layout == "dp2zero":
        data_placement = flow.placement(args.device, ranks=[0, 1])
        model.to_global(data_placement, B)
        graph = Train(model)
        graph.config.enable_zero(stage=1)
    elif args.layout == "tp2":
        data_placement = flow.placement(args.device, ranks=[0, 1])
        model.to_global(data_placement, B)
        # Megatron: first matmuls column-parallel (weight rows = output features), second row-parallel.
        for name, p in model.named_parameters():
            if name.endswith(("fc1.weight", "fc1.bias", "fc.weight", "fc.bias", "c_attn.weight",
                              "c_attn.bias")):
                split = flow.sbp.split(0)
            elif name.endswith(("fc2.weight", "proj.weight", "c_proj.weight")):
                split = flow.sbp.split(1)
            else:
                continue
            owner = model.get_submodule(name.rsplit(".", 1)[0])
            setattr(owner, name.rsplit(".", 1)[1], p.to_global(sbp=split))
        graph = Train(model)
    elif args.layout == "pp2":
        stages = [flow.placement(args.device, ranks=[0]), flow.placement(args.device, ranks=[1])]
        data_placement = stages[0]
        target_placement = stages[1]  # the loss is on the last stage
        if args.eager:  # each stage's modules on its placement (no micro-batches eagerly)
            for modules, p in zip(model.stages(), stages):
                for m in modules:
                    m.to_global(p, B)
        graph = Train(model, placements=stages, micro=MICRO)
    elif args.layout == "dp2tp2":
        data_placement = flow.placement(args.device, ranks=[[0, 1], [2, 3]])
        model.to_global(data_placement, (B, B))
        for name, p in model.named_parameters():
            if name.endswith(("fc1.weight", "fc1.bias", "fc.weight", "fc.bias", "c_attn.weight",
                              "c_attn.bias")):
                split = (B, flow.sbp.split(0))
            elif name.endswith(("fc2.weight", "proj.weight", "c_proj.weight")):
                split = (B, flow.sbp.split(1))
            else:
                continue
            owner = model.get_submodule(name.rsplit(".", 1)[0])
            setattr(owner, name.rsplit(".", 1)[1], p.to_global(sbp=split))
        graph = Train(model)
    else:
        sys.exit(f"unknown layout {args.layout}")


    target_placement = None if args.layout != "pp2" else target_placement


    def feed(array, placement=None):
        placement = placement or data_placement
        if data_placement is None:
            return flow.tensor(array)
        if args.layout == "tp2":
            return flow.tensor(array, placement=data_placement, sbp=B)
        sbp = tuple([S0] + [B] * (len(placement.hierarchy) - 1))
        return flow.tensor(array, placement=placement, sbp=sbp)


    losses = []
    if args.eager:
        assert args.layout in ("dp2", "tp2", "dp2tp2", "pp2"), args.layout
        opt = make_optimizer(model)
        global model_under_test
        model_under_test = model
    for step, (x, y) in enumerate(data):
        if args.eager:
            out = eager_step(model, opt, feed(x), feed(y, target_placement),
                             check_partial_gradient if step == 0 else None)
        else:
            out = graph(feed(x), feed(y, target_placement))
        if data_placement is None:
            losses.append(mean_loss(out.numpy()))
        elif rank in out.placement:
            losses.append(mean_loss(out.numpy()))
    if args.eager:
        weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    else:
        weights = graph.state_dict()
    bad = 0
    if args.layout == "dp2zero":  # ZeRO-1 keeps the parameters whole and splits their state
        name = "model.fc1.weight" if args.model == "mlp" else "model.head.weight"
        assert str(weights[name].sbp[0]) == "B", weights[name]
        assert str(weights[name + ".exp_avg" if args.model == "mlp" else name + ".momentum"]
                   .sbp[0]).startswith("S(")
    if losses:
        if not np.allclose(losses, ref_losses, rtol=1e-4, atol=1e-5):
            print(f"rank {rank}: LOSS MISMATCH {losses} vs {ref_losses}", flush=True)
            bad += 1
    for name, w in weights.items():
        if name.startswith("_graph."):  # the optimizer's step and hyper-parameters
            assert w == ref.state_dict()[name], (name, w)
            continue
        if isinstance(w, flow.GlobalTensor):
            if rank not in w.placement:
                continue
            value = w.numpy()
        elif w is None:
            continue
        else:
            value = w.numpy()
        if not np.allclose(value, ref_weights[name], rtol=1e-4, atol=1e-5):
            print(f"rank {rank}: WEIGHT MISMATCH {name}: max diff "
                  f"{np.abs(value - ref_weights[name]).max()}", flush=True)
            bad += 1
    print(f"rank {rank}: {args.model} {args.layout}{' eager' if args.eager else ''} losses {np.round(losses, 5).tolist()} "
          f"reference {np.round(ref_losses, 5).tolist()} {'OK' if not bad else 'FAILED'}", flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
