#ifndef LOOM_KERNELS_CPU_ATTENTION_PROBABILITIES_H_
#define LOOM_KERNELS_CPU_ATTENTION_PROBABILITIES_H_

// ComputeCausalAttentionProbabilities: the causal softmax probabilities of one (batch, head),
// computed the same way by the CPU attention kernel and by its gradient, which recomputes them
// instead of keeping the forward's.

namespace loom::cpu {

// The causal attention probabilities of one (batch, head), shared by the attention kernel and its
// gradient (which recomputes them exactly as the forward does): P [T, T] = scale * q k^T, then row
// i a stable softmax over columns 0..i and zeros after. `q` and `k` are row-major [T, Dh];
// `probabilities` is row-major [T, T] and is overwritten. `length` and `head_size` are > 0.
void ComputeCausalAttentionProbabilities(const float* q, const float* k, int length, int head_size,
                                         float scale, float* probabilities);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_ATTENTION_PROBABILITIES_H_
