// Fused attention (Note [Fused attention] in oneflowlike/ops/attention.h).

#include <optional>

#include "oneflowlike/ops/attention.h"
#include "python/src/bindings.h"

namespace ofl::python {

void init_attention(py::module_& m) {
  m.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const std::optional<Tensor>& mask,
         double scale, bool is_causal, bool sequence_first, int64_t zigzag, int64_t window,
         const std::optional<Tensor>& document_ids) {
        return functional::scaled_dot_product_attention(q, k, v, mask.value_or(Tensor()), scale,
                                                        is_causal, sequence_first, zigzag, window,
                                                        document_ids.value_or(Tensor()));
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("attn_mask") = py::none(),
      py::arg("scale") = 1.0, py::arg("is_causal") = false, py::arg("sequence_first") = false,
      py::arg("zigzag") = 0, py::arg("window") = 0, py::arg("document_ids") = py::none(),
      "Fused attention of 4-d q, k, v with an additive float mask (or None); returns "
      "(out, lse). sequence_first: q, k, v and out are (B, L, H, E) (Note [Sequence-first "
      "attention]); zigzag: the queries' order (Note [Zigzag order]); window: the latest keys "
      "each causal query sees (Note [Sliding window]); document_ids: (B, S) int32/int64, each "
      "position's document (Note [Packed documents]).");
  m.def(
      "scaled_dot_product_attention_grad",
      [](const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
         const Tensor& lse, const std::optional<Tensor>& mask, double scale, bool is_causal,
         bool sequence_first, int64_t zigzag, int64_t window,
         const std::optional<Tensor>& document_ids) {
        return functional::scaled_dot_product_attention_grad(
            dout, q, k, v, out, lse, mask.value_or(Tensor()), scale, is_causal, sequence_first,
            zigzag, window, document_ids.value_or(Tensor()));
      },
      py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("lse"),
      py::arg("attn_mask") = py::none(), py::arg("scale") = 1.0, py::arg("is_causal") = false,
      py::arg("sequence_first") = false, py::arg("zigzag") = 0, py::arg("window") = 0,
      py::arg("document_ids") = py::none(), "(dq, dk, dv) of scaled_dot_product_attention.");
}

}  // namespace ofl::python
