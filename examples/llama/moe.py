"""A mixture-of-experts feed-forward layer as Mixtral has it (a router picks the top k of E
SwiGLU experts for each token and mixes their outputs by the renormalised router
probabilities), in GShard's dense-dispatch form, so that every shape is fixed before the run and
expert parallelism is only a layout.

Note [Expert capacity]: each sequence is one routing group. Within it every expert takes at most
C = ceil(k * block_size * capacity_factor / E) tokens (block_size at most), queued in token
order, a token's k choices one after the other (a running sum of the choices, counted in int64).
A choice that finds its expert full is dropped: that expert adds nothing to the token, whose
residual carries it on. GShard queues every token's first choice before any token's second;
that order lets a later token take an earlier token's place, so a token's output would depend
on the tokens after it, which a decoder must not see (a review measured 8.5e-3 on the logits).
In token order a token's slots depend only on the tokens before it, and with C fixed by
block_size rather than by the length at hand, a prefix (sampling) routes as the whole sequence
did. The price: the drops fall on a sequence's last tokens, and a token's second choice can
take the slot a later token's first choice wanted, which GShard's order prevents. The routing is a function of one sequence alone, so it is the same whatever the batch is
split into (data parallel ranks, micro-batches). With the sequence stored in the zigzag order
(Note [Zigzag order] in oneflowlike/ops/attention.h) the queue is still the sequence's order:
the choices (K * E integers a token) are put back in it for the running sum, and the slots
(K a token) into the stored order after it, so the routing is the one of the sequence's own
order and stays causal.

Note [Expert parallelism as SBP]: the experts' weights (E, ...) are split over the
data-parallel ranks on their expert axis (common/layout.py), each rank holding E / dp experts
whole (or, with tensor parallelism as well, Megatron's column / row halves of each). The
dispatched tokens (E, B * C, D) arrive split over the batch (the data-parallel layout); the
layer asks for them split over experts instead, which the compiler carries out as one
all-to-all, and asks for the experts' outputs split over the batch again, the second all-to-all.
For the backward the compiler picks by its costs: the two all-to-alls transposed, or, where it
moves fewer bytes (the dispatched tokens are k * capacity_factor times the input), the input's
gradient as partial sums reduce-scattered over the batch.
Nothing else changes: the expert weights' gradients are already whole on the rank that holds
the expert (no all-reduce), the router's are reduced as every replicated weight's.

Note [Load-balancing loss]: Switch / Mixtral's auxiliary loss, E * sum_e f_e * p_e per group
(f_e: the fraction of the group's choices that picked expert e, summed over the k choices; p_e:
the group's mean router probability of e), is 1 per choice when the load is even. ST-MoE's
router z-loss, the group's mean of logsumexp(router logits)^2, keeps the logits small (off
unless router_z_loss_coef is set). Each block adds its groups' weighted losses (aux_loss_coef
times the balance loss, plus router_z_loss_coef times the z-loss) to a (B,) vector that travels
with the activations (so pipeline stages move it as they move them); the head adds its mean
over groups and layers to the cross-entropy.
"""

import math

import oneflowlike as flow
import oneflowlike.nn as nn
import oneflowlike.nn.functional as F


def expert_capacity(c):
    """C of Note [Expert capacity]."""
    return min(c.block_size, math.ceil(c.top_k * c.block_size * c.capacity_factor / c.n_experts))


def route(probs, top_k, capacity, zigzag=0):
    """(dispatch, combine, choice) of Note [Expert capacity] for router probabilities ``probs``
    (B, T, E): dispatch (B, T, E, C) is 1 where a token takes slot c of expert e, combine the
    same weighted by the token's renormalised probability of e, choice (B, T, K, E) the one-hot
    choices (kept or dropped). ``zigzag``: T is stored in that order, queued in the sequence's."""
    B, T, E = probs.shape
    top, chosen = flow.topk(probs, top_k, dim=-1)  # (B, T, K)
    gates = top / top.sum(-1, keepdim=True)
    picks = F.one_hot(chosen, E)  # int64: counts stay exact in any dtype
    in_order = picks.reshape(B, T, top_k * E)
    if zigzag:
        in_order = F.unzigzag(in_order, 1, zigzag)
    queued = in_order.reshape(B, T * top_k, E)  # token-major: a token's k choices, then the next
    slot = ((flow.cumsum(queued, 1) - 1) * queued).sum(-1)  # (B, T * K): place in the queue
    if zigzag:
        slot = F.zigzag(slot.reshape(B, T, top_k), 1, zigzag).reshape(B, T * top_k)
    kept = (slot < capacity).to(flow.int64)
    slots = F.one_hot(slot.clamp(max=capacity - 1), capacity) * kept.unsqueeze(-1)
    slots = slots.reshape(B, T, top_k, capacity).to(probs.dtype)
    choice = picks.to(probs.dtype)
    # Summed over the k choices as products, never as a (B, T, K, E, C) tensor: a token's k
    # choices name k different experts, so each (e, c) takes one term at most.
    dispatch = flow.einsum("btke,btkc->btec", choice, slots)
    combine = flow.einsum("btke,btkc->btec", choice * gates.unsqueeze(-1), slots)
    return dispatch, combine, choice


def router_z_loss(logits):
    """ST-MoE's router z-loss of each group (Note [Load-balancing loss]): (B,)."""
    return (flow.logsumexp(logits, -1) ** 2).mean(-1)


def balance_loss(probs, choice):
    """Note [Load-balancing loss] of each group: (B,)."""
    E = probs.shape[-1]
    picked = choice.mean(1)  # (B, K, E): the fraction of the group's k-th choices per expert
    return (picked * probs.mean(1).unsqueeze(1)).sum(-1).sum(-1) * E


class MoEFeedForward(nn.Module):
    """n_experts SwiGLU experts (w1, w3: (E, D, H); w2: (E, H, D)) behind a linear router;
    forward gives (output, the groups' weighted auxiliary losses (B,))."""

    def __init__(self, c):
        super().__init__()
        self.config = c
        E, D, H = c.n_experts, c.n_embd, c.ffn_hidden
        self.router = nn.Linear(D, E, bias=False)
        self.w1 = nn.Parameter(flow.empty(E, D, H))
        self.w3 = nn.Parameter(flow.empty(E, D, H))
        self.w2 = nn.Parameter(flow.empty(E, H, D))
        self.expert_sbp = self.group_sbp = None  # Note [Expert parallelism as SBP]

    def lay_out_tokens(self, expert_sbp, group_sbp):
        """The layouts the dispatched tokens (E, B * C, D) and the experts' outputs
        (E, B, C, D) take (common/layout.py: split over experts, then over the batch)."""
        self.expert_sbp, self.group_sbp = expert_sbp, group_sbp

    def forward(self, x):
        B, T, D = x.shape
        E, C = self.config.n_experts, expert_capacity(self.config)
        logits = self.router(x)
        probs = F.softmax(logits, dim=-1)
        dispatch, combine, choice = route(probs, self.config.top_k, C, self.config.zigzag)
        tokens = flow.einsum("btec,btd->ebcd", dispatch, x).reshape(E, B * C, D)
        if self.expert_sbp is not None:
            tokens = tokens.to_global(sbp=self.expert_sbp)  # all-to-all
        h = F.silu(flow.matmul(tokens, self.w1)) * flow.matmul(tokens, self.w3)
        out = flow.matmul(h, self.w2).reshape(E, B, C, D)
        if self.group_sbp is not None:
            out = out.to_global(sbp=self.group_sbp)  # all-to-all back
        aux = balance_loss(probs, choice) * self.config.aux_loss_coef
        if self.config.router_z_loss_coef:
            aux = aux + router_z_loss(logits) * self.config.router_z_loss_coef
        return flow.einsum("btec,ebcd->btd", combine, out), aux
