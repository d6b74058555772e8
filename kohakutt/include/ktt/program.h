// Kohaku-TT C++ extensions, program side: describe a Metalium program (reader / compute / writer kernels over
// circular buffers) in C++ and register its builder with KTT_REGISTER_PROGRAM(name, builder). No torch headers:
// a translation unit that only builds programs compiles in a second. The op side (ktt::extension::run) is in
// ktt/extension.h. Find both with kohakutt.extension.include_paths().
//
// A builder takes a Signature (the call's tensors: name, format, layout, never their shapes) and returns a Program,
// the same description Kohaku-TT's HAL runs (kohakutt.hal.program.Program): the simulator runs its kernels' C++
// through the host build of the kernel API, a card through ttnn.generic_op. Sizes and addresses reach the kernels
// as runtime arguments, computed at every run by the program's runtime_args function from the buffers (address,
// pages) and the call's runtime values, so a new shape builds and compiles nothing.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ktt {

// A rectangle of worker cores, start to end inclusive, logical (x, y).
struct CoreRange {
    uint32_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    CoreRange() = default;
    CoreRange(uint32_t x, uint32_t y) : x0(x), y0(y), x1(x), y1(y) {}
    CoreRange(uint32_t sx, uint32_t sy, uint32_t ex, uint32_t ey) : x0(sx), y0(sy), x1(ex), y1(ey) {}
    std::vector<std::pair<uint32_t, uint32_t>> cores() const {
        std::vector<std::pair<uint32_t, uint32_t>> out;
        for (uint32_t y = y0; y <= y1; ++y)
            for (uint32_t x = x0; x <= x1; ++x) out.emplace_back(x, y);
        return out;
    }
};
using CoreRangeSet = std::vector<CoreRange>;

// One tensor of the program as the builder sees it.
struct TensorRef {
    std::string name;
    std::string format;  // "bfloat16", "float32", "bfloat8_b", "bfloat4_b", "int32", "uint32", "uint16", "uint8"
    std::string layout;  // "tile" or "row_major"
    bool output = false;
    uint32_t page_size = 0;  // bytes per page: one tile in its format (0 for row major: a row, known at run time)
    std::vector<uint32_t> accessor_args;  // compile-time args of a TensorAccessor over it (TensorAccessorArgs)
};

// The call's tensors (inputs, then outputs) and static values: what a builder builds from.
struct Signature {
    std::string name;
    std::vector<TensorRef> tensors;
    std::map<std::string, std::string> static_values;
    const TensorRef& operator[](const std::string& n) const {
        for (const auto& t : tensors)
            if (t.name == n) return t;
        throw std::out_of_range("program '" + name + "' has no tensor '" + n + "'");
    }
    const TensorRef& operator[](size_t i) const { return tensors.at(i); }
};

// A circular buffer: num_pages pages of page_size bytes in each core's L1, id index.
struct CircularBuffer {
    uint32_t index = 0;
    std::string format;
    uint32_t page_size = 0;
    uint32_t num_pages = 0;
    CoreRangeSet cores;
};

struct Semaphore {
    uint32_t id = 0;
    CoreRangeSet cores;
    uint32_t initial_value = 0;
};

// A kernel: its C++ as a file (source_file, e.g. ktt::beside(__FILE__, "kernels/reader.cpp")) or text (source).
struct Kernel {
    std::string kind;  // "reader" (NCRISC), "writer" (BRISC) or "compute"
    std::string source_file;
    std::string source;
    CoreRangeSet cores;
    std::vector<uint32_t> compile_time_args;
    std::map<std::string, std::string> defines;
    std::string name;  // default: the kind; runtime arguments are keyed by it
    std::string math_fidelity = "HiFi4";
    bool fp32_dest_acc_en = false;
    bool math_approx_mode = false;
    bool dst_full_sync_en = false;
};

// What the runtime-args function sees of a buffer at each run (on a card: where TT-NN placed it).
struct Buffer {
    uint64_t address = 0;
    uint64_t num_pages = 0;
    uint64_t page_size = 0;
    uint64_t nbytes = 0;
};

// Per kernel name, per core (x, y), the runtime arguments of one run.
using RuntimeArgs = std::map<std::string, std::map<std::pair<uint32_t, uint32_t>, std::vector<uint32_t>>>;
using Runtime = std::map<std::string, uint32_t>;
using RuntimeArgsFn = std::function<RuntimeArgs(const std::vector<Buffer>&, const Runtime&)>;

struct Program {
    std::string name;
    std::vector<Kernel> kernels;
    std::vector<CircularBuffer> cbs;
    std::vector<Semaphore> semaphores;
    RuntimeArgsFn runtime_args;
};

using Builder = std::function<Program(const Signature&)>;

// Split `units` of work over `cores` as evenly as possible: (core, start, count) per core, row by row.
struct WorkSplit {
    std::pair<uint32_t, uint32_t> core;
    uint32_t start, count;
};
inline std::vector<WorkSplit> split_work(uint32_t units, const CoreRangeSet& cores) {
    std::vector<std::pair<uint32_t, uint32_t>> all;
    for (const auto& r : cores)
        for (auto c : r.cores()) all.push_back(c);
    std::vector<WorkSplit> out;
    if (all.empty()) return out;
    uint32_t base = units / all.size(), extra = units % all.size(), start = 0;
    for (size_t i = 0; i < all.size(); ++i) {
        uint32_t n = base + (i < extra ? 1 : 0);
        out.push_back({all[i], start, n});
        start += n;
    }
    return out;
}

// The path of `relative` beside the source file `here` (pass __FILE__).
inline std::string beside(const char* here, const std::string& relative) {
    std::string h(here);
    auto slash = h.find_last_of('/');
    return (slash == std::string::npos ? std::string(".") : h.substr(0, slash)) + "/" + relative;
}

namespace detail {

struct Registry {
    std::mutex lock;
    std::map<std::string, Builder> builders;
    std::vector<Program> built;  // handles index this
};
inline Registry& registry() {
    static Registry r;
    return r;
}

struct Registrar {
    Registrar(const char* name, Builder builder) {
        auto& r = registry();
        std::lock_guard<std::mutex> g(r.lock);
        r.builders[name] = std::move(builder);
    }
};

inline std::string quote(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

template <class T>
std::string list(const std::vector<T>& v) {
    std::ostringstream o;
    o << "[";
    for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
    o << "]";
    return o.str();
}

inline std::string ranges(const CoreRangeSet& cs) {
    std::ostringstream o;
    o << "[";
    for (size_t i = 0; i < cs.size(); ++i)
        o << (i ? "," : "") << "[[" << cs[i].x0 << "," << cs[i].y0 << "],[" << cs[i].x1 << "," << cs[i].y1 << "]]";
    o << "]";
    return o.str();
}

inline std::string to_json(const Program& p, size_t handle) {
    std::ostringstream o;
    o << "{\"handle\":" << handle << ",\"name\":" << quote(p.name) << ",\"kernels\":[";
    for (size_t i = 0; i < p.kernels.size(); ++i) {
        const auto& k = p.kernels[i];
        o << (i ? "," : "") << "{\"kind\":" << quote(k.kind) << ",\"source_file\":" << quote(k.source_file)
          << ",\"source\":" << quote(k.source) << ",\"cores\":" << ranges(k.cores)
          << ",\"compile_time_args\":" << list(k.compile_time_args) << ",\"defines\":{";
        size_t j = 0;
        for (const auto& [dk, dv] : k.defines) o << (j++ ? "," : "") << quote(dk) << ":" << quote(dv);
        o << "},\"name\":" << quote(k.name) << ",\"math_fidelity\":" << quote(k.math_fidelity)
          << ",\"fp32_dest_acc_en\":" << (k.fp32_dest_acc_en ? "true" : "false")
          << ",\"math_approx_mode\":" << (k.math_approx_mode ? "true" : "false")
          << ",\"dst_full_sync_en\":" << (k.dst_full_sync_en ? "true" : "false") << "}";
    }
    o << "],\"cbs\":[";
    for (size_t i = 0; i < p.cbs.size(); ++i) {
        const auto& c = p.cbs[i];
        o << (i ? "," : "") << "{\"index\":" << c.index << ",\"format\":" << quote(c.format)
          << ",\"page_size\":" << c.page_size << ",\"num_pages\":" << c.num_pages << ",\"cores\":" << ranges(c.cores)
          << "}";
    }
    o << "],\"semaphores\":[";
    for (size_t i = 0; i < p.semaphores.size(); ++i) {
        const auto& s = p.semaphores[i];
        o << (i ? "," : "") << "{\"id\":" << s.id << ",\"initial_value\":" << s.initial_value
          << ",\"cores\":" << ranges(s.cores) << "}";
    }
    o << "]}";
    return o.str();
}

inline char* copy_out(const std::string& s) {
    char* out = static_cast<char*>(std::malloc(s.size() + 1));
    std::memcpy(out, s.c_str(), s.size() + 1);
    return out;
}

inline std::string error_json(const std::string& what) { return "{\"error\":" + quote(what) + "}"; }

// The signature travels as lines: "tensor\tname\tformat\tlayout\toutput\tpage_size\targ,arg,..." and
// "static\tkey\tvalue".
inline Signature parse_signature(const char* name, const char* text) {
    Signature sig;
    sig.name = name;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::string part;
        std::istringstream ls(line);
        while (std::getline(ls, part, '\t')) f.push_back(part);
        if (f.size() >= 7 && f[0] == "tensor") {
            TensorRef t{f[1], f[2], f[3], f[4] == "1", static_cast<uint32_t>(std::stoul(f[5])), {}};
            std::istringstream as(f[6]);
            while (std::getline(as, part, ','))
                if (!part.empty()) t.accessor_args.push_back(static_cast<uint32_t>(std::stoul(part)));
            sig.tensors.push_back(t);
        } else if (f.size() >= 3 && f[0] == "static") {
            sig.static_values[f[1]] = f[2];
        }
    }
    return sig;
}

}  // namespace detail
}  // namespace ktt

// Register `builder` (a ktt::Builder: Program(const ktt::Signature&)) as program `name` ("namespace::op").
#define KTT_CONCAT_(a, b) a##b
#define KTT_CONCAT(a, b) KTT_CONCAT_(a, b)
#define KTT_REGISTER_PROGRAM(name, builder) \
    static ::ktt::detail::Registrar KTT_CONCAT(ktt_program_registrar_, __COUNTER__)(name, builder)

// The C entry points kohakutt.extension.load() reads the library's programs through (weak: every translation unit
// that includes this header defines them, the linker keeps one).
extern "C" {
__attribute__((weak, visibility("default"))) char* ktt_extension_programs() {
    auto& r = ::ktt::detail::registry();
    std::lock_guard<std::mutex> g(r.lock);
    std::string out;
    for (const auto& [n, b] : r.builders) out += n + "\n";
    return ::ktt::detail::copy_out(out);
}

__attribute__((weak, visibility("default"))) char* ktt_extension_build(const char* name, const char* signature) {
    auto& r = ::ktt::detail::registry();
    try {
        ::ktt::Builder builder;
        {
            std::lock_guard<std::mutex> g(r.lock);
            auto it = r.builders.find(name);
            if (it == r.builders.end())
                return ::ktt::detail::copy_out(::ktt::detail::error_json(std::string("no program named ") + name));
            builder = it->second;
        }
        ::ktt::Program p = builder(::ktt::detail::parse_signature(name, signature));
        if (!p.runtime_args) return ::ktt::detail::copy_out(::ktt::detail::error_json("the program has no runtime_args"));
        std::lock_guard<std::mutex> g(r.lock);
        r.built.push_back(p);
        return ::ktt::detail::copy_out(::ktt::detail::to_json(p, r.built.size() - 1));
    } catch (const std::exception& e) {
        return ::ktt::detail::copy_out(::ktt::detail::error_json(std::string("the builder threw: ") + e.what()));
    }
}

// buffers: 4 words per buffer (address, pages, page size, bytes); runtime: "key\tvalue" lines.
__attribute__((weak, visibility("default"))) char* ktt_extension_runtime_args(uint64_t handle, const uint64_t* buffers,
                                                                             uint64_t num_buffers,
                                                                             const char* runtime) {
    auto& r = ::ktt::detail::registry();
    try {
        ::ktt::RuntimeArgsFn fn;
        {
            std::lock_guard<std::mutex> g(r.lock);
            if (handle >= r.built.size()) return ::ktt::detail::copy_out(::ktt::detail::error_json("no such program"));
            fn = r.built[handle].runtime_args;
        }
        std::vector<::ktt::Buffer> bufs;
        for (uint64_t i = 0; i < num_buffers; ++i)
            bufs.push_back({buffers[4 * i], buffers[4 * i + 1], buffers[4 * i + 2], buffers[4 * i + 3]});
        ::ktt::Runtime rt;
        std::istringstream in(runtime);
        std::string line;
        while (std::getline(in, line)) {
            auto tab = line.find('\t');
            if (tab != std::string::npos) rt[line.substr(0, tab)] = static_cast<uint32_t>(std::stoul(line.substr(tab + 1)));
        }
        ::ktt::RuntimeArgs args = fn(bufs, rt);
        std::ostringstream o;
        o << "{";
        size_t i = 0;
        for (const auto& [kernel, per_core] : args) {
            o << (i++ ? "," : "") << ::ktt::detail::quote(kernel) << ":[";
            size_t j = 0;
            for (const auto& [core, a] : per_core)
                o << (j++ ? "," : "") << "[[" << core.first << "," << core.second << "]," << ::ktt::detail::list(a)
                  << "]";
            o << "]";
        }
        o << "}";
        return ::ktt::detail::copy_out(o.str());
    } catch (const std::exception& e) {
        return ::ktt::detail::copy_out(::ktt::detail::error_json(std::string("runtime_args threw: ") + e.what()));
    }
}

__attribute__((weak, visibility("default"))) void ktt_extension_free(char* p) { std::free(p); }
}
