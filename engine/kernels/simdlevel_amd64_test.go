//go:build !purego

package kernels

import "golang.org/x/sys/cpu"

// simdLevelTable: the levels of simd_amd64.go and tile_amd64.go, each with the
// CPU features its variable requires (read from the CPU, not from the variable,
// so that a level switched off by mistake shows as skipped on a CPU that has it).
var simdLevelTable = []simdLevel{
	{"avx2", func() bool { return useAVX2 }, func() []string { return lacks(avx2Features()) }},
	{"avx512", func() bool { return useAVX512 }, func() []string { return lacks(avx512Features()) }},
	{"avx512vbmi", func() bool { return useVNNI16 }, func() []string {
		return lacks(append(avx512Features(), cpuFeature{"avx512vbmi", cpu.X86.HasAVX512VBMI}))
	}},
}

type cpuFeature struct {
	name string
	has  bool
}

func avx2Features() []cpuFeature {
	return []cpuFeature{{"avx2", cpu.X86.HasAVX2}, {"fma", cpu.X86.HasFMA}, {"f16c", cpu.X86.HasF16C}}
}

func avx512Features() []cpuFeature {
	return append(avx2Features(), cpuFeature{"avx512f", cpu.X86.HasAVX512F}, cpuFeature{"avx512bw", cpu.X86.HasAVX512BW},
		cpuFeature{"avx512vl", cpu.X86.HasAVX512VL}, cpuFeature{"avx512vnni", cpu.X86.HasAVX512VNNI})
}

func lacks(fs []cpuFeature) []string {
	var l []string
	for _, f := range fs {
		if !f.has {
			l = append(l, f.name)
		}
	}
	return l
}
