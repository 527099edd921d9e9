"""Running an example trainer (examples/*/train.py) as a user would, on one process or through
the launcher, and reading its --log-json curve: shared by the example tests."""

import json
import os
import pathlib
import re
import subprocess
import sys

_CONTRACT = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
             "MASTER_PORT")


def clean_env():
    """This process's environment without the launcher's contract or oneflowlike's settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OFL_")) and k not in _CONTRACT}


def train(script, base_flags, tmp_path, nproc, *flags, steps=10, tag="run", env=None,
          output=False):
    """Runs ``script`` with ``base_flags`` and ``flags`` for ``steps`` steps on ``nproc``
    processes; returns the per-step records of its JSON log (and its stdout with ``output``)."""
    log = tmp_path / f"{tag}.jsonl"
    args = [str(script), *base_flags, "--steps", str(steps), "--log-json", str(log), *flags]
    if nproc == 1:
        command = [sys.executable, *args]
    else:
        command = [sys.executable, "-m", "oneflowlike.distributed.launch", "--nproc_per_node",
                   str(nproc), *args]
    result = subprocess.run(command, env={**clean_env(), **(env or {})}, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "done:" in result.stdout, result.stdout
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return (records, result.stdout) if output else records


def launch_on_hosts(hosts, script, script_args, launcher_flags=(), env=None, timeout=120):
    """``script`` launched on two network-namespace hosts (conftest's two_hosts), one rank each,
    UCX over TCP on their veth pair only; returns each launcher's (exit code, output)."""
    import secrets

    secret = secrets.token_hex(16)
    launchers = []
    try:
        for node_rank, host in enumerate(hosts):
            command = ["ip", "netns", "exec", host.namespace, sys.executable, "-m",
                       "oneflowlike.distributed.launch", "--nnodes", "2", "--node_rank",
                       str(node_rank), "--nproc_per_node", "1", "--master_addr",
                       hosts[0].address, "--secret", secret, *launcher_flags, str(script),
                       *script_args]
            launcher_env = {**clean_env(), **(env or {}), "UCX_TLS": "tcp,self",
                            "UCX_NET_DEVICES": host.device}
            launchers.append(subprocess.Popen(command, env=launcher_env, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
        outputs = [launcher.communicate(timeout=timeout)[0] for launcher in launchers]
    finally:
        for launcher in launchers:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
    return [(launcher.returncode, output) for launcher, output in zip(launchers, outputs)]


def planned_peaks_mib(stdout):
    """Each rank's planned peak from the trainer's summary lines, by rank."""
    peaks = {}
    for line in stdout.splitlines():
        match = re.search(r"rank (\d+): peak rss .* planned peak ([\d.]+) MiB", line)
        if match:
            peaks[int(match.group(1))] = float(match.group(2))
    return peaks


def collectives(stdout, rank):
    """{op: count} of rank ``rank``'s plan-summary collectives line (--plan-summary)."""
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if f"] rank {rank}: " in line and "tasks (" in line)
    words = lines[at + 1].split("collectives:")[1].split() if "collectives:" in lines[at + 1] else []
    return {op: int(n) for op, n in zip(words[::2], words[1::2])}


def losses(records):
    return [r["loss"] for r in records]


def torch_curve(torch, ours, model, train, args, steps=10, autocast=False):
    """The example's training loop in PyTorch: ``model`` (the torch twin) starts from the weights
    of ``ours`` (the flow model train.py builds) and trains with the example's optimizer (AdamW
    over its two groups), schedule, clipping and ByteData batches; under
    torch.autocast("cpu", bfloat16) with ``autocast``. Returns the losses."""
    model.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                           for k, v in ours.state_dict().items()})
    # The example's two groups: no weight decay on vectors and embedding tables.
    skip = train.trainer.no_decay_names(ours)
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if n not in skip]},
              {"params": [p for n, p in named if n in skip], "weight_decay": 0.0}]
    assert groups[0]["params"] and groups[1]["params"]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=args.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, train.lr_lambda(args))
    data = train.ByteData(args.data, args.block_size, args.seed)
    losses = []
    for step in range(1, steps + 1):
        tokens, targets = data.batch(step, args.batch_size)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = model(torch.from_numpy(tokens), torch.from_numpy(targets))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        schedule.step()
        losses.append(loss.float().item())
    return losses


def llama_twin_losses(torch, flags, steps=10):
    """The PyTorch twin's curve (examples/llama/llama_torch.py) from the initial weights
    examples/llama/train.py builds with ``flags``, through ``torch_curve``."""
    import oneflowlike as flow

    train = load_script(pathlib.Path(__file__).resolve().parents[2] / "examples" / "llama"
                        / "train.py", "llama_train")
    from llama_model import Llama
    from llama_torch import torch_llama

    args = train.parse([*flags, "--steps", str(steps)])
    config = train.config_of(args)
    flow.manual_seed(args.seed)  # train.py's initial weights
    ours = Llama(config)
    torch.set_num_threads(1)
    return torch_curve(torch, ours, torch_llama(config), train, args, steps)


def load_script(path, name):
    """The example script at ``path`` as module ``name`` (two examples' sample.py would both be
    "sample" on sys.path)."""
    import importlib.util

    sys.path.insert(0, str(pathlib.Path(path).parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_greedy_sampling(torch, sample, checkpoint, twin_of, tokens=24):
    """Greedy (top-k 1) continuation of a prompt from ``checkpoint`` by ``sample`` (an example's
    sample.py): each new byte is the argmax of the PyTorch twin's logits (``twin_of(config)``,
    the same weights) on the same sequence, teacher-forced so that a near tie cannot make the
    two sequences drift apart; the model's logits equal the twin's."""
    import numpy as np

    import oneflowlike as flow

    model = sample.load_model(str(checkpoint))
    twin = twin_of(model.config)
    twin.load_state_dict({k: torch.from_numpy(v.numpy().copy())
                          for k, v in model.state_dict().items()})
    prompt = list(b"And God said")
    out = sample.generate(model, flow.tensor([prompt], dtype=flow.int64), tokens, top_k=1)
    row = out.numpy()[0]
    assert list(row[:len(prompt)]) == prompt and len(row) == len(prompt) + tokens
    block = model.config.block_size
    with torch.no_grad():
        for t in range(len(prompt), len(row)):
            context = torch.from_numpy(row[max(0, t - block):t][None].copy())
            logits = twin(context)[0, -1]
            ours = model(flow.tensor(context.numpy()))[0, -1].numpy()
            np.testing.assert_allclose(ours, logits.numpy(), rtol=1e-4, atol=1e-4)
            assert float(logits[row[t]]) >= float(logits.max()) - 1e-4, t
