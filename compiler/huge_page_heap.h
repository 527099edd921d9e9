#pragma once
// The heap of oneflowlike-plan on huge pages.
//
// Note [Huge-page heap]
// ---------------------
// A whole-job plan of 1,024 ranks is about 6 GiB of small protobuf messages, written once each.
// On 4 KiB pages that is 1.5 million page faults, each of which makes the kernel clear a fresh
// page; in a VM a fault also makes the host back the page. Measured on this machine, faults
// took a third of the 1,024-rank compile (14 s of system time) and grew faster than the plan:
// about 2.5 us each at 256 ranks, 9 us at 1,024 (docs/benchmarks.md, "Collectives" (b)). The
// tool therefore gives tcmalloc a system allocator that maps memory in 2 MiB-aligned chunks
// advised for transparent huge pages (MADV_HUGEPAGE: Debian's default THP mode, "madvise",
// honours it), so the same heap takes about 30,000 faults. Nothing is unmapped (tcmalloc's
// default allocator does not unmap either; its scavenger may still release freed spans' pages,
// which splits their huge pages). Only this tool: the runtime and the Python module keep their
// process's allocator.

namespace ofl::compiler {

/// Installs the huge-page allocator under tcmalloc; false when the process's malloc is not
/// tcmalloc or OFL_HUGE_PAGE_HEAP is 0 (to measure without it; nothing changes then).
bool use_huge_page_heap();

}  // namespace ofl::compiler
