// Kohaku-TT C++ extensions: programs (ktt/program.h: KTT_REGISTER_PROGRAM) and the torch ops that run them.
//
//   at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
//       return ktt::extension::run("ns::swiglu", {a, b}, {{a.sizes().vec(), a.scalar_type()}})[0];
//   }
//   TORCH_LIBRARY(ns, m) { m.def("swiglu(Tensor a, Tensor b) -> Tensor"); }
//   TORCH_LIBRARY_IMPL(ns, PrivateUse1, m) { m.impl("swiglu", &swiglu); }  // tt tensors: queue the program
//   TORCH_LIBRARY_IMPL(ns, Meta, m) { m.impl("swiglu", &swiglu); }         // meta / fake tensors: shapes only
//
// run() queues program `name` over the inputs into new tt tensors of `outputs` on the current tt stream, in order
// with every other op, and returns them at once (through Kohaku-TT's op layer: kohakutt.kernels.custom.ProgramOp).
// Given meta tensors it only makes the outputs, so the same function is the op's meta kernel: torch.compile,
// AOTAutograd and kohakutt.capture take the op. Build with torch.utils.cpp_extension (include_paths: torch's and
// kohakutt.extension.include_paths()); load with kohakutt.extension.load(path).
#pragma once

#include <torch/extension.h>

#include <string>
#include <vector>

#include "ktt/program.h"

namespace ktt {
namespace extension {

// An output to make: its shape and dtype.
struct OutputSpec {
    std::vector<int64_t> shape;
    at::ScalarType dtype;
};

// Queue program `name` over `inputs` (tt tensors, in the program's order) into new outputs; `runtime` are the
// call's runtime values (uint32) the program's runtime_args function reads.
inline std::vector<at::Tensor> run(const std::string& name, const std::vector<at::Tensor>& inputs,
                                   const std::vector<OutputSpec>& outputs, const Runtime& runtime = {}) {
    if (inputs.empty()) throw std::invalid_argument("ktt::extension::run(" + name + "): give at least one input tensor");
    bool meta = false;
    for (const auto& t : inputs) meta = meta || t.is_meta();
    if (meta) {
        std::vector<at::Tensor> out;
        for (const auto& o : outputs)
            out.push_back(at::empty(o.shape, at::TensorOptions().dtype(o.dtype).device(inputs[0].device())));
        return out;
    }
    pybind11::gil_scoped_acquire gil;
    pybind11::list specs;
    for (const auto& o : outputs) {
        pybind11::list shape;
        for (auto s : o.shape) shape.append(s);
        specs.append(pybind11::make_tuple(shape, pybind11::cast(c10::toString(o.dtype))));
    }
    pybind11::dict rt;
    for (const auto& [k, v] : runtime) rt[pybind11::str(k)] = v;
    // A Python error (a ProgramError, say) propagates as itself: torch restores it for the Python caller.
    pybind11::object result = pybind11::module_::import("kohakutt.extension").attr("_run")(name, inputs, specs, rt);
    return result.cast<std::vector<at::Tensor>>();
}

}  // namespace extension
}  // namespace ktt
