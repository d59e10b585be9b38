//go:build !amd64 || purego

package kernels

func usesPanel(wt Type, rows int) bool { return false }

func (m *matMul) panelTokens(lo, hi int) int { return lo }
