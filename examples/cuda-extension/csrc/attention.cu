// A plain attention kernel: one thread per query row, keys streamed with an online softmax
// in float32. Simple on purpose: the example shows the build, not a fast kernel.
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

constexpr int kMaxHeadDim = 128;
constexpr int kThreads = 128;

template <typename T>
__global__ void attention_rows(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, T* __restrict__ o, int seq_q,
                               int seq_k, int dim, float scale, bool causal) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  const long head = blockIdx.y;  // batch * heads + head
  if (row >= seq_q) return;
  const T* q_row = q + (head * seq_q + row) * dim;
  const T* keys = k + head * seq_k * dim;
  const T* values = v + head * seq_k * dim;
  float acc[kMaxHeadDim];
  for (int d = 0; d < dim; ++d) acc[d] = 0.f;
  float running_max = -INFINITY, denominator = 0.f;
  // Causal masks are bottom-right aligned: row r sees keys up to r + seq_k - seq_q.
  const int end = causal ? min(seq_k, row + 1 + seq_k - seq_q) : seq_k;
  for (int j = 0; j < end; ++j) {
    float score = 0.f;
    for (int d = 0; d < dim; ++d) score += float(q_row[d]) * float(keys[j * dim + d]);
    score *= scale;
    const float new_max = fmaxf(running_max, score);
    const float rescale = __expf(running_max - new_max), p = __expf(score - new_max);
    denominator = denominator * rescale + p;
    for (int d = 0; d < dim; ++d) acc[d] = acc[d] * rescale + p * float(values[j * dim + d]);
    running_max = new_max;
  }
  T* o_row = o + (head * seq_q + row) * dim;
  for (int d = 0; d < dim; ++d) o_row[d] = T(acc[d] / denominator);
}

torch::Tensor attention_forward_cuda(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, bool causal, double scale) {
  auto o = torch::empty_like(q);
  const int seq_q = q.size(2), seq_k = k.size(2), dim = q.size(3);
  const dim3 grid((seq_q + kThreads - 1) / kThreads, q.size(0) * q.size(1));
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "attention", [&] {
    attention_rows<scalar_t><<<grid, kThreads, 0, stream>>>(
        q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
        o.data_ptr<scalar_t>(), seq_q, seq_k, dim, static_cast<float>(scale), causal);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return o;
}
