// Device side of the swiglu extension: the program that computes silu(a) * b over every tile, built from the
// call's tensors (in0 = a, in1 = b, out0), split over four cores. Only ktt/program.h: no torch headers here.
#include "ktt/program.h"

namespace {

const ktt::CoreRangeSet kCores = {ktt::CoreRange(0, 0, 3, 0)};  // four cores in a row

ktt::Program swiglu(const ktt::Signature& sig) {
    const ktt::TensorRef &a = sig["in0"], &b = sig["in1"], &out = sig["out0"];
    ktt::Program p;
    p.name = "swiglu";
    std::vector<uint32_t> reader_args = a.accessor_args;
    reader_args.insert(reader_args.end(), b.accessor_args.begin(), b.accessor_args.end());
    p.kernels = {
        {"reader", ktt::beside(__FILE__, "kernels/reader.cpp"), "", kCores, reader_args},
        {"compute", ktt::beside(__FILE__, "kernels/compute.cpp"), "", kCores},
        {"writer", ktt::beside(__FILE__, "kernels/writer.cpp"), "", kCores, out.accessor_args},
    };
    p.kernels[1].fp32_dest_acc_en = true;
    p.cbs = {
        {0, a.format, a.page_size, 2, kCores},
        {1, b.format, b.page_size, 2, kCores},
        {16, out.format, out.page_size, 2, kCores},
    };
    // Sizes and addresses at every run: the tiles of the output, split over the cores.
    p.runtime_args = [](const std::vector<ktt::Buffer>& t, const ktt::Runtime&) {
        ktt::RuntimeArgs args;
        for (const auto& w : ktt::split_work(static_cast<uint32_t>(t[2].num_pages), kCores)) {
            args["reader"][w.core] = {uint32_t(t[0].address), uint32_t(t[1].address), w.start, w.count};
            args["compute"][w.core] = {w.count};
            args["writer"][w.core] = {uint32_t(t[2].address), w.start, w.count};
        }
        return args;
    };
    return p;
}

}  // namespace

KTT_REGISTER_PROGRAM("kohakutt_example_cpp::swiglu", swiglu);
