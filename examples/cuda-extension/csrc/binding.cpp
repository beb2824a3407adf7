// Every shape, dtype and device check happens here, with a message that says what is wrong.
#include <torch/extension.h>

torch::Tensor attention_forward_cuda(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, bool causal, double scale);

constexpr int64_t kMaxHeadDim = 128;  // the kernel keeps a row's accumulator in registers

torch::Tensor forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool causal,
                      double scale) {
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda(), "q, k and v must be CUDA tensors");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "expected [batch, heads, seq, dim]");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k and v must share a dtype");
  TORCH_CHECK(k.sizes() == v.sizes(), "k and v must have one shape");
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(1) == k.size(1) && q.size(3) == k.size(3),
              "q and k must agree in batch, heads and head dim (no GQA)");
  TORCH_CHECK(q.size(3) <= kMaxHeadDim, "head dim above ", kMaxHeadDim);
  return attention_forward_cuda(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "attention forward (q, k, v, causal, scale)");
}
