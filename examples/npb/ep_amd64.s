#include "textflag.h"

// The constants of math.Log (its amd64 assembly), two copies each for the
// packed operations.
#define PAIR(name, bits) \
	DATA name<>+0(SB)/8, $bits \
	DATA name<>+8(SB)/8, $bits \
	GLOBL name<>(SB), RODATA|NOPTR, $16

PAIR(epMant, 0x000FFFFFFFFFFFFF)
PAIR(epHalf, 0x3FE0000000000000)
PAIR(epOne, 0x3FF0000000000000)
PAIR(epTwo, 0x4000000000000000)
PAIR(epMinus2, 0xC000000000000000)
PAIR(epTwo52, 0x4330000000000000)
PAIR(ep1022, 0x408FF00000000000)
PAIR(epHSqrt2, 0x3FE6A09E667F3BCD)
PAIR(epLn2Hi, 0x3FE62E42FEE00000)
PAIR(epLn2Lo, 0x3DEA39EF35793C76)
PAIR(epL1, 0x3FE5555555555593)
PAIR(epL2, 0x3FD999999997FA04)
PAIR(epL3, 0x3FD2492494229359)
PAIR(epL4, 0x3FCC71C51D8E78AF)
PAIR(epL5, 0x3FC7466496CB03DE)
PAIR(epL6, 0x3FC39A09D078C69F)
PAIR(epL7, 0x3FC2F112DF3E5244)

// func epGauss(x *float64, t2 *float64, pairs int)
//
// Two pairs at a time: t1 = x1·x1 + x2·x2, then math.Log(t1) by the steps
// of math.Log's amd64 assembly on packed doubles, then
// t2 = sqrt(-2·log(t1)/t1). pairs is even.
TEXT ·epGauss(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ t2+8(FP), DI
	MOVQ pairs+16(FP), CX

loop:
	CMPQ CX, $0
	JLE  done

	// t1 of the two pairs: X15 = [x1a²+x2a², x1b²+x2b²]
	MOVUPD   0(SI), X0
	MOVUPD   16(SI), X1
	MULPD    X0, X0
	MULPD    X1, X1
	MOVAPD   X0, X2
	UNPCKLPD X1, X0
	UNPCKHPD X1, X2
	ADDPD    X2, X0
	MOVAPD   X0, X15

	// f1, ki := math.Frexp(x); k := float64(ki): X2 = f1, X1 = k
	MOVUPD epMant<>(SB), X2
	ANDPD  X0, X2
	MOVUPD epHalf<>(SB), X3
	ORPD   X3, X2
	MOVAPD X0, X1
	PSRLQ  $52, X1
	MOVUPD epTwo52<>(SB), X3
	ORPD   X3, X1
	SUBPD  X3, X1
	MOVUPD ep1022<>(SB), X3
	SUBPD  X3, X1

	// if f1 < math.Sqrt2/2 { k -= 1; f1 *= 2 }, as math.Log's assembly
	// decides it (cmpnlt)
	MOVUPD epHSqrt2<>(SB), X3
	CMPPD  X2, X3, 5
	MOVUPD epOne<>(SB), X4
	ANDPD  X4, X3
	SUBPD  X3, X1
	ADDPD  X4, X3
	MULPD  X3, X2

	// f := f1 - 1
	SUBPD X4, X2

	// s := f / (2 + f)
	MOVUPD epTwo<>(SB), X0
	ADDPD  X2, X0
	MOVAPD X2, X3
	DIVPD  X0, X3

	// s2 := s * s; s4 := s2 * s2
	MOVAPD X3, X4
	MULPD  X4, X4
	MOVAPD X4, X5
	MULPD  X5, X5

	// t1 := s2 * (L1 + s4*(L3+s4*(L5+s4*L7)))
	MOVUPD epL7<>(SB), X6
	MULPD  X5, X6
	MOVUPD epL5<>(SB), X7
	ADDPD  X7, X6
	MULPD  X5, X6
	MOVUPD epL3<>(SB), X7
	ADDPD  X7, X6
	MULPD  X5, X6
	MOVUPD epL1<>(SB), X7
	ADDPD  X7, X6
	MULPD  X6, X4

	// t2 := s4 * (L2 + s4*(L4+s4*L6))
	MOVUPD epL6<>(SB), X6
	MULPD  X5, X6
	MOVUPD epL4<>(SB), X7
	ADDPD  X7, X6
	MULPD  X5, X6
	MOVUPD epL2<>(SB), X7
	ADDPD  X7, X6
	MULPD  X6, X5

	// R := t1 + t2
	ADDPD X5, X4

	// hfsq := 0.5 * f * f
	MOVUPD epHalf<>(SB), X0
	MULPD  X2, X0
	MULPD  X2, X0

	// log = k*Ln2Hi - ((hfsq - (s*(hfsq+R) + k*Ln2Lo)) - f)
	ADDPD  X0, X4
	MULPD  X4, X3
	MOVUPD epLn2Lo<>(SB), X4
	MULPD  X1, X4
	ADDPD  X4, X3
	SUBPD  X3, X0
	SUBPD  X2, X0
	MOVUPD epLn2Hi<>(SB), X4
	MULPD  X4, X1
	SUBPD  X0, X1

	// t2 = sqrt(-2 * log / t1)
	MOVUPD epMinus2<>(SB), X0
	MULPD  X1, X0
	DIVPD  X15, X0
	SQRTPD X0, X0
	MOVUPD X0, 0(DI)

	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $2, CX
	JMP  loop

done:
	RET
