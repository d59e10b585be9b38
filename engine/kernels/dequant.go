package kernels

import (
	"fmt"
	"math"
)

// DequantizeRow decodes len(dst) elements of type t from src (exactly
// t.RowBytes(len(dst)) bytes) into dst.
func DequantizeRow(dst []float32, t Type, src []byte) {
	n := len(dst)
	if want := t.RowBytes(n); len(src) != want {
		panic(fmt.Sprintf("kernels: DequantizeRow %v: %d bytes for %d elements, want %d", t, len(src), n, want))
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(src[4*i]) | uint32(src[4*i+1])<<8 | uint32(src[4*i+2])<<16 | uint32(src[4*i+3])<<24)
		}
	case F16:
		for i := range dst {
			dst[i] = f16Table[le16(src[2*i:])]
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(le16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < n/qk0; b++ {
			blk := src[b*34 : (b+1)*34]
			d := f16Table[le16(blk)]
			for j := 0; j < qk0; j++ {
				dst[b*qk0+j] = d * float32(int8(blk[2+j]))
			}
		}
	case Q4_0:
		for b := 0; b < n/qk0; b++ {
			blk := src[b*18 : (b+1)*18]
			d := f16Table[le16(blk)]
			y := dst[b*qk0:]
			for j := 0; j < qk0/2; j++ {
				y[j] = d * float32(int(blk[2+j]&0xf)-8)
				y[j+16] = d * float32(int(blk[2+j]>>4)-8)
			}
		}
	case Q4_K:
		for b := 0; b < n/qkK; b++ {
			dequantQ4K(dst[b*qkK:(b+1)*qkK], src[b*144:(b+1)*144])
		}
	case Q6_K:
		for b := 0; b < n/qkK; b++ {
			dequantQ6K(dst[b*qkK:(b+1)*qkK], src[b*210:(b+1)*210])
		}
	default:
		c := refCodecOf(t)
		if c == nil {
			panic("kernels: DequantizeRow of " + t.String())
		}
		bs, bb := t.BlockSize(), t.BlockBytes()
		for b := 0; b < n/bs; b++ {
			c.dequant(dst[b*bs:(b+1)*bs], src[b*bb:(b+1)*bb])
		}
	}
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j from a Q4_K block's 12
// scale bytes (ggml's get_scale_min_k4): sub-blocks 0-3 keep their low 6 bits in
// bytes j and j+4; sub-blocks 4-7 keep their low 4 bits in byte j+4 and their top 2
// bits in the top bits of bytes j-4 and j.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q4_K block: d f16, dmin f16, scales [12]byte, qs [128]byte. Each 64 elements use
// 32 bytes of qs: low nibbles are the first 32 elements, high nibbles the next 32.
func dequantQ4K(y []float32, blk []byte) {
	d := f16Table[le16(blk)]
	dmin := f16Table[le16(blk[2:])]
	scales := blk[4:16]
	qs := blk[16:144]
	for j := 0; j < 4; j++ {
		sc1, m1 := scaleMinK4(2*j, scales)
		sc2, m2 := scaleMinK4(2*j+1, scales)
		d1, mm1 := d*float32(sc1), dmin*float32(m1)
		d2, mm2 := d*float32(sc2), dmin*float32(m2)
		q := qs[32*j : 32*j+32]
		for l := 0; l < 32; l++ {
			y[64*j+l] = d1*float32(q[l]&0xf) - mm1
			y[64*j+32+l] = d2*float32(q[l]>>4) - mm2
		}
	}
}

// q6KValue returns the 6-bit quant (0..63) of element e (0..255) of a Q6_K block.
// Each 128 elements use 64 bytes of ql and 32 of qh: element l+32k (k=0..3) has its
// low 4 bits in ql[l] (k even) or ql[l+32] (k odd), low nibble for k<2, and its top
// 2 bits in qh[l] at bit 2k.
func q6KValue(ql, qh []byte, e int) int {
	h, r := e/128, e%128
	k, l := r/32, r%32
	lo := ql[64*h+l+32*(k&1)]
	if k >= 2 {
		lo >>= 4
	}
	return int(lo&0xf) | int((qh[32*h+l]>>(2*k))&3)<<4
}

// Q6_K block: ql [128]byte, qh [64]byte, scales [16]int8, d f16.
func dequantQ6K(y []float32, blk []byte) {
	ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
	d := f16Table[le16(blk[208:])]
	for e := 0; e < qkK; e++ {
		y[e] = d * float32(int8(sc[e/16])) * float32(q6KValue(ql, qh, e)-32)
	}
}
