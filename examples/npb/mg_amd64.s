#include "textflag.h"

// The rows of MG's stencils, four doubles at a time (AVX). Every element
// gets the same IEEE operations in the same order as the Go code of mg.go
// (no fused multiply-add), so the results are bit-identical to it. The
// caller checks that useAVX holds and that the slices are long
// enough.

// func mgSum4(dst, a, b, c, d *float64, n int)
TEXT ·mgSum4(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ c+24(FP), R9
	MOVQ d+32(FP), R10
	MOVQ n+40(FP), CX
	XORQ AX, AX
	MOVQ CX, DX
	ANDQ $-4, DX

sum4loop:
	CMPQ    AX, DX
	JGE     sum4tail
	VMOVUPD (SI)(AX*8), Y0
	VADDPD  (R8)(AX*8), Y0, Y0
	VADDPD  (R9)(AX*8), Y0, Y0
	VADDPD  (R10)(AX*8), Y0, Y0
	VMOVUPD Y0, (DI)(AX*8)
	ADDQ    $4, AX
	JMP     sum4loop

sum4tail:
	CMPQ   AX, CX
	JGE    sum4done
	VMOVSD (SI)(AX*8), X0
	VADDSD (R8)(AX*8), X0, X0
	VADDSD (R9)(AX*8), X0, X0
	VADDSD (R10)(AX*8), X0, X0
	VMOVSD X0, (DI)(AX*8)
	INCQ   AX
	JMP    sum4tail

sum4done:
	VZEROUPPER
	RET

// func mgResidRow(r, v, u, u1, u2 *float64, n int, a0, a2, a3 float64)
TEXT ·mgResidRow(SB), NOSPLIT, $0-72
	MOVQ         r+0(FP), DI
	MOVQ         v+8(FP), SI
	MOVQ         u+16(FP), R8
	MOVQ         u1+24(FP), R9
	MOVQ         u2+32(FP), R10
	MOVQ         n+40(FP), CX
	VBROADCASTSD a0+48(FP), Y10
	VBROADCASTSD a2+56(FP), Y11
	VBROADCASTSD a3+64(FP), Y12
	DECQ         CX             // j runs over [1, n-1)
	MOVQ         $1, AX
	MOVQ         CX, DX
	SUBQ         $3, DX         // a block of 4 starting at j fits while j < n-4

residloop:
	CMPQ    AX, DX
	JGE     residtail
	VMOVUPD (R8)(AX*8), Y0
	VMULPD  Y10, Y0, Y0         // a0·u[j]
	VMOVUPD (SI)(AX*8), Y1
	VSUBPD  Y0, Y1, Y1          // v[j] - a0·u[j]
	VMOVUPD (R10)(AX*8), Y2
	VADDPD  -8(R9)(AX*8), Y2, Y2 // u2[j] + u1[j-1]
	VADDPD  8(R9)(AX*8), Y2, Y2 // + u1[j+1]
	VMULPD  Y11, Y2, Y2
	VSUBPD  Y2, Y1, Y1
	VMOVUPD -8(R10)(AX*8), Y3
	VADDPD  8(R10)(AX*8), Y3, Y3 // u2[j-1] + u2[j+1]
	VMULPD  Y12, Y3, Y3
	VSUBPD  Y3, Y1, Y1
	VMOVUPD Y1, (DI)(AX*8)
	ADDQ    $4, AX
	JMP     residloop

residtail:
	CMPQ   AX, CX
	JGE    residdone
	VMOVSD (R8)(AX*8), X0
	VMULSD X10, X0, X0
	VMOVSD (SI)(AX*8), X1
	VSUBSD X0, X1, X1
	VMOVSD (R10)(AX*8), X2
	VADDSD -8(R9)(AX*8), X2, X2
	VADDSD 8(R9)(AX*8), X2, X2
	VMULSD X11, X2, X2
	VSUBSD X2, X1, X1
	VMOVSD -8(R10)(AX*8), X3
	VADDSD 8(R10)(AX*8), X3, X3
	VMULSD X12, X3, X3
	VSUBSD X3, X1, X1
	VMOVSD X1, (DI)(AX*8)
	INCQ   AX
	JMP    residtail

residdone:
	VZEROUPPER
	RET

// func mgPsinvRow(u, r, r1, r2 *float64, n int, c0, c1, c2 float64)
TEXT ·mgPsinvRow(SB), NOSPLIT, $0-64
	MOVQ         u+0(FP), DI
	MOVQ         r+8(FP), SI
	MOVQ         r1+16(FP), R9
	MOVQ         r2+24(FP), R10
	MOVQ         n+32(FP), CX
	VBROADCASTSD c0+40(FP), Y10
	VBROADCASTSD c1+48(FP), Y11
	VBROADCASTSD c2+56(FP), Y12
	DECQ         CX
	MOVQ         $1, AX
	MOVQ         CX, DX
	SUBQ         $3, DX

psinvloop:
	CMPQ    AX, DX
	JGE     psinvtail
	VMOVUPD (SI)(AX*8), Y0
	VMULPD  Y10, Y0, Y0          // c0·r[j]
	VMOVUPD (DI)(AX*8), Y1
	VADDPD  Y0, Y1, Y1           // u[j] + c0·r[j]
	VMOVUPD -8(SI)(AX*8), Y2
	VADDPD  8(SI)(AX*8), Y2, Y2  // r[j-1] + r[j+1]
	VADDPD  (R9)(AX*8), Y2, Y2   // + r1[j]
	VMULPD  Y11, Y2, Y2
	VADDPD  Y2, Y1, Y1
	VMOVUPD (R10)(AX*8), Y3
	VADDPD  -8(R9)(AX*8), Y3, Y3 // r2[j] + r1[j-1]
	VADDPD  8(R9)(AX*8), Y3, Y3  // + r1[j+1]
	VMULPD  Y12, Y3, Y3
	VADDPD  Y3, Y1, Y1
	VMOVUPD Y1, (DI)(AX*8)
	ADDQ    $4, AX
	JMP     psinvloop

psinvtail:
	CMPQ   AX, CX
	JGE    psinvdone
	VMOVSD (SI)(AX*8), X0
	VMULSD X10, X0, X0
	VMOVSD (DI)(AX*8), X1
	VADDSD X0, X1, X1
	VMOVSD -8(SI)(AX*8), X2
	VADDSD 8(SI)(AX*8), X2, X2
	VADDSD (R9)(AX*8), X2, X2
	VMULSD X11, X2, X2
	VADDSD X2, X1, X1
	VMOVSD (R10)(AX*8), X3
	VADDSD -8(R9)(AX*8), X3, X3
	VADDSD 8(R9)(AX*8), X3, X3
	VMULSD X12, X3, X3
	VADDSD X3, X1, X1
	VMOVSD X1, (DI)(AX*8)
	INCQ   AX
	JMP    psinvtail

psinvdone:
	VZEROUPPER
	RET

// func mgInterpRow(u, x *float64, n int, a, b float64)
TEXT ·mgInterpRow(SB), NOSPLIT, $0-40
	MOVQ         u+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSD a+24(FP), Y10
	VBROADCASTSD b+32(FP), Y11
	XORQ         AX, AX
	MOVQ         CX, DX
	ANDQ         $-4, DX

interploop:
	CMPQ       AX, DX
	JGE        interptail
	LEAQ       (AX)(AX*1), BX
	VMOVUPD    (SI)(AX*8), Y0
	VMOVUPD    8(SI)(AX*8), Y1
	VADDPD     Y0, Y1, Y2           // x[i+1] + x[i]
	VMULPD     Y10, Y0, Y3          // evens: a·x[i]
	VMULPD     Y11, Y2, Y2          // odds: b·(x[i+1] + x[i])
	VUNPCKLPD  Y2, Y3, Y4           // [e0 o0 e2 o2]
	VUNPCKHPD  Y2, Y3, Y5           // [e1 o1 e3 o3]
	VPERM2F128 $0x20, Y5, Y4, Y6    // [e0 o0 e1 o1]
	VPERM2F128 $0x31, Y5, Y4, Y7    // [e2 o2 e3 o3]
	VADDPD     (DI)(BX*8), Y6, Y6
	VADDPD     32(DI)(BX*8), Y7, Y7
	VMOVUPD    Y6, (DI)(BX*8)
	VMOVUPD    Y7, 32(DI)(BX*8)
	ADDQ       $4, AX
	JMP        interploop

interptail:
	CMPQ   AX, CX
	JGE    interpdone
	LEAQ   (AX)(AX*1), BX
	VMOVSD (SI)(AX*8), X0
	VMOVSD 8(SI)(AX*8), X1
	VADDSD X0, X1, X2
	VMULSD X10, X0, X3
	VMULSD X11, X2, X2
	VADDSD (DI)(BX*8), X3, X3
	VADDSD 8(DI)(BX*8), X2, X2
	VMOVSD X3, (DI)(BX*8)
	VMOVSD X2, 8(DI)(BX*8)
	INCQ   AX
	JMP    interptail

interpdone:
	VZEROUPPER
	RET
