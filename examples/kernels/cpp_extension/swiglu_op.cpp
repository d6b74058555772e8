// Torch side of the swiglu extension: the op torch.ops.kohakutt_example_cpp.swiglu(a, b) = silu(a) * b on tt
// tensors, queued through Kohaku-TT's op layer (ktt::extension::run); the same function is its meta kernel.
#include "ktt/extension.h"

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
    TORCH_CHECK(a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type(),
                "swiglu takes a and b of one shape and dtype, got ", a.sizes(), " and ", b.sizes());
    return ktt::extension::run("kohakutt_example_cpp::swiglu", {a, b}, {{a.sizes().vec(), a.scalar_type()}})[0];
}

TORCH_LIBRARY(kohakutt_example_cpp, m) { m.def("swiglu(Tensor a, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(kohakutt_example_cpp, PrivateUse1, m) { m.impl("swiglu", &swiglu); }
TORCH_LIBRARY_IMPL(kohakutt_example_cpp, Meta, m) { m.impl("swiglu", &swiglu); }
