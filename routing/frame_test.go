package routing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/dpvm/dpvm/task"
)

func TestFrameRoundTrip(t *testing.T) {
	envs := []Envelope{
		{From: task.NewTID(1, 1), To: task.NewTID(2, 9), Seq: 1, Tag: 0, Body: task.Payload{Enc: task.EncBytes, Data: []byte("hi")}},
		{From: task.NewTID(3, 4), To: task.NewTID(1, 1), Seq: 1 << 40, Tag: task.MaxTag, Body: task.Payload{Enc: task.EncFloat64s, Data: make([]byte, 16)}},
		{From: task.NewTID(3, 4), To: task.NewTID(1, 1), Seq: 2, Tag: 7, Body: task.Payload{Enc: task.EncMsgpack, Data: []byte{}}},
	}
	var stream []byte
	stream, off := BeginFrame(stream, KindMsgs)
	for i := range envs {
		stream = AppendEnvelope(stream, &envs[i])
	}
	EndFrame(stream, off)
	acks := []Ack{{From: task.NewTID(1, 1), To: task.NewTID(2, 2), Seq: 5}}
	var ab []byte
	for _, a := range acks {
		ab = AppendAck(ab, a)
	}
	stream = AppendFrame(stream, KindAcks, ab)
	refs := []Refusal{{To: task.NewTID(2, 3), Route: Route{Host: 4, Epoch: 9, InTransit: true}}}
	stream = AppendFrame(stream, KindRefuse, AppendRefusal(nil, refs[0]))
	stream = AppendFrame(stream, KindPing, []byte{1})

	r := NewReader(bytes.NewReader(stream), 0)
	f, err := r.Next()
	if err != nil || f.Kind != KindMsgs {
		t.Fatalf("first frame %v %v", f.Kind, err)
	}
	var got []Envelope
	if err := DecodeEnvelopes(f.Body, func(e Envelope) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Body.Data == nil {
			got[i].Body.Data = []byte{}
		}
	}
	if !reflect.DeepEqual(got, envs) {
		t.Fatalf("envelopes\n got %+v\nwant %+v", got, envs)
	}
	f, _ = r.Next()
	var gotAcks []Ack
	if err := DecodeAcks(f.Body, func(a Ack) { gotAcks = append(gotAcks, a) }); err != nil || !reflect.DeepEqual(gotAcks, acks) {
		t.Fatalf("acks %v %v", gotAcks, err)
	}
	f, _ = r.Next()
	var gotRefs []Refusal
	if err := DecodeRefusals(f.Body, func(x Refusal) { gotRefs = append(gotRefs, x) }); err != nil || !reflect.DeepEqual(gotRefs, refs) {
		t.Fatalf("refusals %v %v", gotRefs, err)
	}
	if f, err := r.Next(); err != nil || f.Kind != KindPing || !bytes.Equal(f.Body, []byte{1}) {
		t.Fatalf("ping %v %v", f, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
}

func TestFrameErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"too large", AppendFrame(nil, KindMsgs, make([]byte, 100)), 99, ErrFrameTooLarge},
		{"unknown kind", AppendFrame(nil, Kind(200), nil), 0, ErrUnknownKind},
		{"kind zero", AppendFrame(nil, Kind(0), nil), 0, ErrUnknownKind},
		{"zero length", []byte{0, 0, 0, 0, 1}, 0, ErrMalformed},
		{"short header", []byte{1, 0}, 0, ErrMalformed},
		{"short body", AppendFrame(nil, KindCall, make([]byte, 10))[:12], 0, ErrMalformed},
	}
	for _, c := range cases {
		_, err := NewReader(bytes.NewReader(c.in), c.max).Next()
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	bad := [][]byte{
		make([]byte, envHeader-1),                              // short envelope
		AppendEnvelope(nil, &Envelope{From: 0, To: 2, Seq: 1}), // sequenced without a sender
		AppendEnvelope(nil, &Envelope{From: 1, To: 0, Seq: 1}), // no receiver
		AppendEnvelope(nil, &Envelope{From: 1, To: 2, Seq: 1, Tag: -1}),
		AppendEnvelope(nil, &Envelope{From: 1, To: 2, Seq: 1, Body: task.Payload{Enc: 99}}),
		AppendEnvelope(nil, &Envelope{From: 1, To: 2, Seq: 1, Body: task.Payload{Data: []byte("abc")}})[:envHeader+2],
	}
	for i, b := range bad {
		if err := DecodeEnvelopes(b, func(Envelope) error { return nil }); !errors.Is(err, ErrMalformed) {
			t.Errorf("bad envelope %d: %v", i, err)
		}
	}
	if err := DecodeAcks(make([]byte, ackSize+1), func(Ack) {}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad acks: %v", err)
	}
	if err := DecodeRefusals(make([]byte, RefusalSize+3), func(Refusal) {}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad refusals: %v", err)
	}
}

// FuzzFrameReader feeds arbitrary bytes to the frame reader and the body
// decoders: they must return frames or errors, never panic or allocate
// beyond the frame limit.
func FuzzFrameReader(f *testing.F) {
	e := Envelope{From: 1 << 32, To: 2 << 32, Seq: 1, Tag: 3, Body: task.Payload{Enc: task.EncBytes, Data: []byte("x")}}
	f.Add(AppendFrame(nil, KindMsgs, AppendEnvelope(nil, &e)))
	f.Add(AppendFrame(nil, KindAcks, AppendAck(nil, Ack{From: 1, To: 2, Seq: 3})))
	f.Add(AppendFrame(nil, KindRefuse, AppendRefusal(nil, Refusal{To: 5})))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b), 1<<16)
		for {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if len(fr.Body) > 1<<16 {
				t.Fatalf("frame of %d bytes passed the limit", len(fr.Body))
			}
			switch fr.Kind {
			case KindMsgs, KindRefuse:
				_ = DecodeEnvelopes(fr.Body, func(Envelope) error { return nil })
				_ = DecodeRefusals(fr.Body, func(Refusal) {})
			case KindAcks:
				_ = DecodeAcks(fr.Body, func(Ack) {})
			}
		}
	})
}

// TestFrameClaimAllocatesLittle: a header claiming a body of the largest
// size, followed by a few bytes, costs an allocation of the order of what
// arrived, not of the claim; a large body that does arrive reads whole.
func TestFrameClaimAllocatesLittle(t *testing.T) {
	const claim = 64 << 20
	var b bytes.Buffer
	b.Write(binary.LittleEndian.AppendUint32(nil, claim+1))
	b.WriteByte(byte(KindCall))
	b.WriteString("a few bytes")
	fr := NewReader(&b, claim)
	if _, err := fr.Next(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a truncated frame: %v", err)
	}
	if c := cap(fr.buf); c > 2*growStep {
		t.Fatalf("%d bytes allocated for a claim of %d with 11 bytes sent", c, claim)
	}
	body := make([]byte, 5*growStep+3)
	for i := range body {
		body[i] = byte(i * 7)
	}
	fr = NewReader(bytes.NewReader(AppendFrame(nil, KindCall, body)), claim)
	f, err := fr.Next()
	if err != nil || !bytes.Equal(f.Body, body) {
		t.Fatalf("a %d-byte frame: %v", len(body), err)
	}
}
