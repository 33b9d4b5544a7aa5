package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var stat = Stat{
	Czxid: 0x100000002, Mzxid: 0x100000007, Ctime: 1700000000123, Mtime: 1700000000456,
	Version: 3, Cversion: 2, Aversion: 1, EphemeralOwner: 0x1234567890abcdef,
	DataLength: 5, NumChildren: 2, Pzxid: 0x100000009,
}

var acl = []ACL{
	{Perms: PermAll, ID: WorldAnyone},
	{Perms: PermRead | PermAdmin, ID: ID{Scheme: "digest", ID: "alice:XDkd2dsEuhc9ImU3q8pa8UOdtpI="}},
}

// A sample is a record with the op whose body it is; op is 0 for the
// records that are no op's body.
type sample struct {
	op  OpCode
	rec Record
}

// requestSamples holds a request body for every op DecodeRequest serves.
func requestSamples() []sample {
	return []sample{
		{OpCreate, &CreateRequest{Path: "/app/lock-", Data: []byte("hello"), ACL: acl, Flags: ModeEphemeralSequential}},
		{OpCreate2, &CreateRequest{Path: "/app/n", Data: nil, ACL: OpenACL, Flags: ModePersistent}},
		{OpCreateContainer, &CreateRequest{Path: "/app/c", Data: []byte{}, ACL: OpenACL, Flags: ModeContainer}},
		{OpCreateTTL, &CreateTTLRequest{Path: "/app/t", Data: []byte{1, 2}, ACL: OpenACL, Flags: ModePersistentWithTTL, TTL: 60000}},
		{OpDelete, &DeleteRequest{Path: "/app/n", Version: -1}},
		{OpExists, &ExistsRequest{Path: "/app", Watch: true}},
		{OpGetData, &GetDataRequest{Path: "/app", Watch: false}},
		{OpSetData, &SetDataRequest{Path: "/app", Data: []byte("new"), Version: 7}},
		{OpGetACL, &GetACLRequest{Path: "/app"}},
		{OpSetACL, &SetACLRequest{Path: "/app", ACL: acl, Version: 0}},
		{OpGetChildren, &GetChildrenRequest{Path: "/", Watch: true}},
		{OpGetChildren2, &GetChildren2Request{Path: "/app", Watch: true}},
		{OpSync, &SyncRequest{Path: "/app"}},
		{OpCheck, &CheckVersionRequest{Path: "/app", Version: 4}},
		{OpMulti, &MultiRequest{Ops: []MultiOp{
			{Type: OpCheck, Request: &CheckVersionRequest{Path: "/app", Version: 4}},
			{Type: OpCreate, Request: &CreateRequest{Path: "/app/a", Data: []byte("a"), ACL: OpenACL}},
			{Type: OpCreate2, Request: &CreateRequest{Path: "/app/b", ACL: OpenACL, Flags: ModeEphemeral}},
			{Type: OpCreateContainer, Request: &CreateRequest{Path: "/app/c", ACL: OpenACL, Flags: ModeContainer}},
			{Type: OpCreateTTL, Request: &CreateTTLRequest{Path: "/app/d", ACL: OpenACL, Flags: ModePersistentSequentialWithTTL, TTL: 1}},
			{Type: OpSetData, Request: &SetDataRequest{Path: "/app", Data: []byte("x"), Version: -1}},
			{Type: OpDelete, Request: &DeleteRequest{Path: "/app/old", Version: 2}},
		}}},
		{OpMultiRead, &MultiRequest{Ops: []MultiOp{
			{Type: OpGetChildren, Request: &GetChildrenRequest{Path: "/app"}},
			{Type: OpGetData, Request: &GetDataRequest{Path: "/app/a"}},
		}}},
		{OpAuth, &AuthPacket{Type: 0, Scheme: "digest", Auth: []byte("alice:secret")}},
		{OpSetWatches, &SetWatches{RelativeZxid: 42, DataWatches: []string{"/a", "/b"}, ExistWatches: []string{"/c"}, ChildWatches: nil}},
		{OpSetWatches2, &SetWatches2{RelativeZxid: 43, DataWatches: []string{"/a"}, ChildWatches: []string{"/"},
			PersistentWatches: []string{"/p"}, PersistentRecursiveWatches: []string{"/r", "/s"}}},
		{OpAddWatch, &AddWatchRequest{Path: "/app", Mode: AddWatchPersistentRecursive}},
		{OpCheckWatches, &CheckWatchesRequest{Path: "/app", Type: WatcherData}},
		{OpRemoveWatches, &RemoveWatchesRequest{Path: "/app", Type: WatcherAny}},
		{OpGetEphemerals, &GetEphemeralsRequest{PrefixPath: "/app"}},
		{OpGetAllChildrenNum, &GetAllChildrenNumberRequest{Path: "/app"}},
		{OpPing, &Empty{}},
		{OpCloseSession, &Empty{}},
		{OpWhoAmI, &Empty{}},
	}
}

// responseSamples holds a response body for every op DecodeResponse
// serves.
func responseSamples() []sample {
	return []sample{
		{OpCreate, &CreateResponse{Path: "/app/lock-0000000007"}},
		{OpCreate2, &Create2Response{Path: "/app/n", Stat: stat}},
		{OpCreateContainer, &Create2Response{Path: "/app/c", Stat: stat}},
		{OpCreateTTL, &Create2Response{Path: "/app/t", Stat: stat}},
		{OpDelete, &Empty{}},
		{OpExists, &ExistsResponse{Stat: stat}},
		{OpGetData, &GetDataResponse{Data: []byte("hello"), Stat: stat}},
		{OpSetData, &SetDataResponse{Stat: stat}},
		{OpGetACL, &GetACLResponse{ACL: acl, Stat: stat}},
		{OpSetACL, &SetACLResponse{Stat: stat}},
		{OpGetChildren, &GetChildrenResponse{Children: []string{"a", "b", "lock-0000000007"}}},
		{OpGetChildren2, &GetChildren2Response{Children: []string{"x"}, Stat: stat}},
		{OpSync, &SyncResponse{Path: "/app"}},
		{OpCheck, &SetDataResponse{Stat: stat}},
		{OpMulti, &MultiResponse{Results: []MultiResult{
			{Type: OpCheck},
			{Type: OpCreate, Response: &CreateResponse{Path: "/app/a"}},
			{Type: OpCreate2, Response: &Create2Response{Path: "/app/b", Stat: stat}},
			{Type: OpSetData, Response: &SetDataResponse{Stat: stat}},
			{Type: OpDelete},
			{Type: OpError, Response: &ErrorResponse{Err: CodeOK}},
			{Type: OpError, Response: &ErrorResponse{Err: CodeBadVersion}},
			{Type: OpError, Response: &ErrorResponse{Err: CodeRuntimeInconsistency}},
		}}},
		{OpMultiRead, &MultiResponse{Results: []MultiResult{
			{Type: OpGetChildren, Response: &GetChildrenResponse{Children: []string{"a", "b"}}},
			{Type: OpGetData, Response: &GetDataResponse{Data: []byte("a"), Stat: stat}},
			{Type: OpError, Response: &ErrorResponse{Err: CodeNoNode}},
		}}},
		{OpAuth, &Empty{}},
		{OpSetWatches, &Empty{}},
		{OpSetWatches2, &Empty{}},
		{OpAddWatch, &ErrorResponse{Err: CodeOK}},
		{OpCheckWatches, &Empty{}},
		{OpRemoveWatches, &Empty{}},
		{OpGetEphemerals, &GetEphemeralsResponse{Ephemerals: []string{"/app/lock-0000000007", "/e"}}},
		{OpGetAllChildrenNum, &GetAllChildrenNumberResponse{TotalNumber: 12345}},
		{OpWhoAmI, &WhoAmIResponse{ClientInfo: []ClientInfo{{AuthScheme: "ip", User: "127.0.0.1"}, {AuthScheme: "digest", User: "alice"}}}},
		{OpCloseSession, &Empty{}},
		{OpPing, &Empty{}},
	}
}

// otherSamples holds the records that are no op's body.
func otherSamples() []Record {
	return []Record{
		&ConnectRequest{ProtocolVersion: 0, LastZxidSeen: 0x100000003, TimeOut: 30000, SessionID: 0x72ab, Passwd: bytes.Repeat([]byte{7}, 16), ReadOnly: true},
		&ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16), OmitReadOnly: true},
		&ConnectResponse{TimeOut: 4000, SessionID: 0x72ab, Passwd: bytes.Repeat([]byte{9}, 16)},
		&ConnectResponse{TimeOut: 4000, SessionID: 0x72ab, Passwd: bytes.Repeat([]byte{9}, 16), OmitReadOnly: true},
		&RequestHeader{Xid: 17, Type: OpGetChildren2},
		&RequestHeader{Xid: XidPing, Type: OpPing},
		&ReplyHeader{Xid: 17, Zxid: 0x100000009, Err: CodeNoNode},
		&WatcherEvent{Type: EventNodeChildrenChanged, State: StateSyncConnected, Path: "/app"},
		&MultiHeader{Type: OpError, Done: false, Err: CodeNotEmpty},
		&MultiHeader{Type: -1, Done: true, Err: -1},
	}
}

// allSamples is every sample record, with a name for failures.
func allSamples() map[string]Record {
	all := map[string]Record{}
	for i, s := range requestSamples() {
		all[s.op.String()+" request"+suffix(i)] = s.rec
	}
	for i, s := range responseSamples() {
		all[s.op.String()+" response"+suffix(i)] = s.rec
	}
	for i, r := range otherSamples() {
		all[reflect.TypeOf(r).Elem().Name()+suffix(i)] = r
	}
	return all
}

func suffix(i int) string { return " #" + string(rune('0'+i%10)) + string(rune('0'+i/10)) }

// newLike returns a new empty record of r's type.
func newLike(r Record) Record { return reflect.New(reflect.TypeOf(r).Elem()).Interface().(Record) }

func TestRoundTrip(t *testing.T) {
	for name, r := range allSamples() {
		b := Marshal(nil, r)
		got := newLike(r)
		if err := Unmarshal(b, got); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if diff := cmp.Diff(r, got); diff != "" {
			t.Errorf("%s: differs after a round trip (-sent +decoded):\n%s", name, diff)
		}
		if again := Marshal(nil, got); !bytes.Equal(again, b) {
			t.Errorf("%s: re-encodes to\n%x\nnot\n%x", name, again, b)
		}
	}
}

func TestDecodeRequest(t *testing.T) {
	served := map[OpCode]bool{}
	for _, s := range requestSamples() {
		served[s.op] = true
		got, err := DecodeRequest(s.op, Marshal(nil, s.rec))
		if err != nil {
			t.Errorf("%v: %v", s.op, err)
			continue
		}
		if diff := cmp.Diff(s.rec, got); diff != "" {
			t.Errorf("%v: (-sent +decoded):\n%s", s.op, diff)
		}
	}
	for op, o := range ops {
		if o.request != nil && !served[op] {
			t.Errorf("%v has no request sample", op)
		}
	}
}

func TestDecodeResponse(t *testing.T) {
	served := map[OpCode]bool{}
	for _, s := range responseSamples() {
		served[s.op] = true
		if want := ResponseFor(s.op); reflect.TypeOf(want) != reflect.TypeOf(s.rec) {
			t.Errorf("%v: ResponseFor gives %T, the sample is %T", s.op, want, s.rec)
		}
		got, err := DecodeResponse(s.op, Marshal(nil, s.rec))
		if err != nil {
			t.Errorf("%v: %v", s.op, err)
			continue
		}
		if diff := cmp.Diff(s.rec, got); diff != "" {
			t.Errorf("%v: (-sent +decoded):\n%s", s.op, diff)
		}
	}
	for op := range ops {
		if !served[op] {
			t.Errorf("%v has no response sample", op)
		}
	}
}

func TestUnknownOps(t *testing.T) {
	for _, op := range []OpCode{OpNotification, OpReconfig, OpDeleteContainer, OpSASL, OpCreateSession, OpError, 10, 99, 1000, -100} {
		if _, err := DecodeRequest(op, nil); !errors.Is(err, ErrUnknownOp) || errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeRequest(%v): err %v, want ErrUnknownOp", op, err)
		}
		if _, err := AppendReply(nil, ReplyHeader{Xid: 1}, op, nil); !errors.Is(err, ErrUnknownOp) {
			t.Errorf("AppendReply(%v): err %v, want ErrUnknownOp", op, err)
		}
		if ResponseFor(op) != nil {
			t.Errorf("ResponseFor(%v) is not nil", op)
		}
	}
	if s := OpCode(99).String(); s != "op(99)" {
		t.Errorf("OpCode(99) is %q", s)
	}
}

// unhex decodes hex written with spaces between fields.
func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGolden checks encodings written out by hand from zookeeper.jute, so
// that the codec is checked against the format, not only against itself.
func TestGolden(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []Record
		hex  string
	}{
		{
			"getData request frame",
			[]Record{&RequestHeader{Xid: 1, Type: OpGetData}, &GetDataRequest{Path: "/a", Watch: true}},
			`0000000f /* length 15 */ 00000001 /* xid */ 00000004 /* getData */
			 00000002 2f61 /* "/a" */ 01 /* watch */`,
		},
		{
			"create request: ustring, null buffer, vector<ACL>, int",
			[]Record{&CreateRequest{Path: "/n", Data: nil, ACL: OpenACL, Flags: ModeEphemeralSequential}},
			`00000029 /* 41 */
			 00000002 2f6e
			 ffffffff /* null data */
			 00000001 /* one ACL */ 0000001f /* perms */ 00000005 776f726c64 /* world */ 00000006 616e796f6e65 /* anyone */
			 00000003 /* ephemeral sequential */`,
		},
		{
			"connect request as go-zookeeper sends it, without readOnly",
			[]Record{&ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16), OmitReadOnly: true}},
			`0000002c 00000000 /* protocol */ 0000000000000000 /* last zxid */ 00000fa0 /* 4000 ms */
			 0000000000000000 /* session */ 00000010 00000000000000000000000000000000 /* passwd */`,
		},
		{
			"connect response with readOnly",
			[]Record{&ConnectResponse{TimeOut: 4000, SessionID: 0x0102030405060708, Passwd: []byte{0xaa, 0xbb}}},
			`00000017 00000000 00000fa0 0102030405060708 00000002 aabb 00 /* readOnly */`,
		},
		{
			"exists reply: header and Stat",
			[]Record{&ReplyHeader{Xid: 5, Zxid: 0x10, Err: CodeOK}, &ExistsResponse{Stat: Stat{
				Czxid: 1, Mzxid: 2, Ctime: 3, Mtime: 4, Version: 5, Cversion: 6, Aversion: 7,
				EphemeralOwner: 8, DataLength: 9, NumChildren: 10, Pzxid: 11}}},
			`00000054 /* 16 + 68 */ 00000005 0000000000000010 00000000
			 0000000000000001 0000000000000002 0000000000000003 0000000000000004
			 00000005 00000006 00000007 0000000000000008 00000009 0000000a 000000000000000b`,
		},
		{
			"watch event",
			[]Record{&ReplyHeader{Xid: XidWatchEvent, Zxid: -1}, &WatcherEvent{Type: EventNodeDeleted, State: StateSyncConnected, Path: "/x"}},
			`0000001e ffffffff ffffffffffffffff 00000000
			 00000002 /* NodeDeleted */ 00000003 /* SyncConnected */ 00000002 2f78`,
		},
		{
			"multi request: check and delete",
			[]Record{&MultiRequest{Ops: []MultiOp{
				{Type: OpCheck, Request: &CheckVersionRequest{Path: "/a", Version: 1}},
				{Type: OpDelete, Request: &DeleteRequest{Path: "/b", Version: -1}},
			}}},
			`0000002f /* 3 headers of 9, 2 ops of 10 */
			 0000000d 00 ffffffff /* check, not done, err -1 */ 00000002 2f61 00000001
			 00000002 00 ffffffff /* delete */ 00000002 2f62 ffffffff
			 ffffffff 01 ffffffff /* done */`,
		},
		{
			"failed multi's results",
			[]Record{&MultiResponse{Results: []MultiResult{
				{Type: OpError, Response: &ErrorResponse{Err: CodeOK}},
				{Type: OpError, Response: &ErrorResponse{Err: CodeNoNode}},
			}}},
			`00000023 /* 3 headers of 9, 2 errors of 4 */
			 ffffffff 00 00000000 00000000
			 ffffffff 00 ffffff9b ffffff9b /* -101, in the header and the body */
			 ffffffff 01 ffffffff`,
		},
	} {
		want := unhex(t, stripComments(c.hex))
		got, err := AppendFrame(nil, c.recs...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", c.name, got, want)
		}
	}
}

// stripComments removes /* ... */ from s.
func stripComments(s string) string {
	for {
		i := strings.Index(s, "/*")
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], "*/")
		s = s[:i] + s[i+j+2:]
	}
}

func TestConnectReadOnlyOptional(t *testing.T) {
	with := Marshal(nil, &ConnectRequest{TimeOut: 1, Passwd: []byte{}, ReadOnly: true})
	var r ConnectRequest
	if err := Unmarshal(with, &r); err != nil || !r.ReadOnly || r.OmitReadOnly {
		t.Fatalf("with readOnly: %+v, %v", r, err)
	}
	if err := Unmarshal(with[:len(with)-1], &r); err != nil || r.ReadOnly || !r.OmitReadOnly {
		t.Fatalf("without readOnly: %+v, %v", r, err)
	}
	if err := Unmarshal(append(with, 0), &r); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a byte after readOnly: err %v, want ErrMalformed", err)
	}
}

func TestAppendReply(t *testing.T) {
	hdr := ReplyHeader{Xid: 9, Zxid: 100}
	got, err := AppendReply([]byte("keep"), hdr, OpGetData, &GetDataResponse{Data: []byte("d"), Stat: stat})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := AppendFrame([]byte("keep"), &hdr, &GetDataResponse{Data: []byte("d"), Stat: stat})
	if !bytes.Equal(got, want) {
		t.Errorf("getData reply\n%x\nwant\n%x", got, want)
	}

	// An error reply is the header alone, whatever resp is.
	bad := ReplyHeader{Xid: 9, Zxid: 100, Err: CodeNoNode}
	got, err = AppendReply(nil, bad, OpGetData, &GetDataResponse{})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := AppendFrame(nil, &bad); !bytes.Equal(got, want) {
		t.Errorf("error reply %x, want %x", got, want)
	}

	// nil stands for Empty, and only where Empty answers.
	if _, err := AppendReply(nil, hdr, OpDelete, nil); err != nil {
		t.Errorf("delete with nil: %v", err)
	}
	for _, c := range []struct {
		op   OpCode
		resp Record
	}{
		{OpGetData, nil},
		{OpGetData, &SetDataResponse{}},
		{OpCreate, &Create2Response{}},
		{OpMulti, &MultiResponse{Results: []MultiResult{{Type: OpCreate, Response: &Create2Response{}}}}},
		{OpMulti, &MultiResponse{Results: []MultiResult{{Type: OpDelete, Response: &Empty{}}}}},
		{OpMulti, &MultiResponse{Results: []MultiResult{{Type: OpExists, Response: &ExistsResponse{}}}}},
	} {
		b := []byte("keep")
		out, err := AppendReply(b, hdr, c.op, c.resp)
		if err == nil {
			t.Errorf("%v answered with %T: no error", c.op, c.resp)
		}
		if string(out) != "keep" {
			t.Errorf("%v answered with %T: b changed to %q", c.op, c.resp, out)
		}
	}
}

func TestAppendEvent(t *testing.T) {
	ev := WatcherEvent{Type: EventNodeCreated, State: StateSyncConnected, Path: "/w"}
	b, err := AppendEvent(nil, &ev)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := ReadFrame(bytes.NewReader(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr, body, err := SplitReply(frame)
	if err != nil {
		t.Fatal(err)
	}
	if hdr != (ReplyHeader{Xid: XidWatchEvent, Zxid: -1}) {
		t.Errorf("header %+v", hdr)
	}
	var got WatcherEvent
	if err := Unmarshal(body, &got); err != nil || got != ev {
		t.Errorf("event %+v, %v; want %+v", got, err, ev)
	}
	if _, err := AppendEvent(nil, &WatcherEvent{Path: strings.Repeat("x", MaxPacket)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("an event too large: err %v", err)
	}
}

func TestSplit(t *testing.T) {
	frame := Marshal(Marshal(nil, &RequestHeader{Xid: 3, Type: OpSync}), &SyncRequest{Path: "/s"})
	hdr, body, err := SplitRequest(frame)
	if err != nil || hdr != (RequestHeader{Xid: 3, Type: OpSync}) {
		t.Fatalf("SplitRequest: %+v, %v", hdr, err)
	}
	if req, err := DecodeRequest(hdr.Type, body); err != nil || req.(*SyncRequest).Path != "/s" {
		t.Fatalf("DecodeRequest: %+v, %v", req, err)
	}
	for i := range requestHeaderSize {
		if _, _, err := SplitRequest(frame[:i]); !errors.Is(err, ErrMalformed) {
			t.Errorf("SplitRequest of %d bytes: err %v", i, err)
		}
	}
	for i := range replyHeaderSize {
		if _, _, err := SplitReply(make([]byte, i)); !errors.Is(err, ErrMalformed) {
			t.Errorf("SplitReply of %d bytes: err %v", i, err)
		}
	}
}

// TestTruncations cuts every sample short at every byte: each cut is an
// error that wraps ErrMalformed, and none panics.
func TestTruncations(t *testing.T) {
	for name, r := range allSamples() {
		b := Marshal(nil, r)
		for i := range len(b) {
			if optionalReadOnly(r) && i == len(b)-1 {
				continue
			}
			if err := Unmarshal(b[:i], newLike(r)); !errors.Is(err, ErrMalformed) {
				t.Errorf("%s cut to %d of %d bytes: err %v, want ErrMalformed", name, i, len(b), err)
			}
		}
		if _, ok := r.(*Empty); ok {
			continue
		}
		if c, ok := r.(*ConnectRequest); ok && c.OmitReadOnly {
			continue // the byte more is the flag
		}
		if c, ok := r.(*ConnectResponse); ok && c.OmitReadOnly {
			continue
		}
		if err := Unmarshal(append(b, 0), newLike(r)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s with a byte more: err %v, want ErrMalformed", name, err)
		}
	}
}

// optionalReadOnly reports whether r is a handshake record that ends in
// its readOnly flag, without which it is still whole.
func optionalReadOnly(r Record) bool {
	switch r := r.(type) {
	case *ConnectRequest:
		return !r.OmitReadOnly
	case *ConnectResponse:
		return !r.OmitReadOnly
	}
	return false
}

func be32(v int32) []byte { return Marshal(nil, &ErrorResponse{Err: Code(v)}) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestMalformed(t *testing.T) {
	path := cat(be32(2), []byte("/a"))
	for _, c := range []struct {
		name string
		op   OpCode
		body []byte
		want string
	}{
		{"negative string length", OpSync, be32(-2), "string length -2 is negative"},
		{"string longer than the frame", OpSync, cat(be32(100), []byte("/a")), "string needs 100 bytes, 2 left"},
		{"huge string", OpSync, be32(0x7fffffff), "string needs 2147483647 bytes, 0 left"},
		{"negative buffer length", OpSetData, cat(path, be32(-5)), "buffer length -5 is negative"},
		{"huge buffer", OpSetData, cat(path, be32(0x7ffffff0), be32(0)), "buffer needs 2147483632 bytes, 4 left"},
		{"vector longer than the frame", OpSetWatches, cat(make([]byte, 8), be32(3), be32(0), be32(0)), "vector<ustring> claims 3 elements of at least 4 bytes, 8 bytes left"},
		{"huge ACL vector", OpSetACL, cat(path, be32(0x7fffffff)), "vector<ACL> claims"},
		{"negative vector", OpSetWatches, cat(make([]byte, 8), be32(-7)), "vector<ustring> length -7 is negative"},
		{"trailing bytes", OpSync, cat(path, []byte{0}), "1 bytes left over"},
		{"ping with a body", OpPing, []byte{0}, "1 bytes left over"},
		{"multi op not allowed", OpMulti, cat(be32(int32(OpExists)), []byte{0}, be32(-1), path, []byte{0}), "exists cannot be part of a multi"},
		{"read in a multi", OpMulti, cat(be32(int32(OpGetData)), []byte{0}, be32(-1), path, []byte{0}, be32(-1), []byte{1}, be32(-1)), "getData cannot be part of a multi"},
		{"write in a multiRead", OpMultiRead, cat(be32(int32(OpDelete)), []byte{0}, be32(-1), path, be32(0), be32(-1), []byte{1}, be32(-1)), "delete cannot be part of a multiRead"},
		{"multi without its end", OpMulti, cat(be32(int32(OpDelete)), []byte{0}, be32(-1), path, be32(0)), "int needs 4 bytes, 0 left"},
		{"nested multi", OpMulti, cat(be32(int32(OpMulti)), []byte{0}, be32(-1)), "multi cannot be part of a multi"},
	} {
		_, err := DecodeRequest(c.op, c.body)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrMalformed saying %q", c.name, err, c.want)
		}
	}

	// A result type no multi result has.
	_, err := DecodeResponse(OpMulti, cat(be32(int32(OpExists)), []byte{0}, be32(0)))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "no multi result has type exists") {
		t.Errorf("multi result of type exists: err %v", err)
	}
}

// TestErrorText checks that an error names the record and the offset.
func TestErrorText(t *testing.T) {
	body := cat(be32(2), []byte("/a"), be32(200), []byte{1, 2, 3})
	_, err := DecodeRequest(OpSetData, body)
	want := "zookeeper protocol: malformed record: setData request: at byte 10: buffer needs 200 bytes, 3 left"
	if err == nil || err.Error() != want {
		t.Errorf("err %q, want %q", err, want)
	}
	err = Unmarshal(nil, &ConnectRequest{})
	want = "zookeeper protocol: malformed record: ConnectRequest: at byte 0: int needs 4 bytes, 0 left"
	if err == nil || err.Error() != want {
		t.Errorf("err %q, want %q", err, want)
	}
}

// TestNullsAndEmpties checks the conventions the package documents for
// null and empty values.
func TestNullsAndEmpties(t *testing.T) {
	// A null string, buffer and vector.
	body := cat(be32(-1), be32(-1), be32(-1), be32(0))
	r, err := DecodeRequest(OpCreate, body)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&CreateRequest{}, r); diff != "" {
		t.Errorf("nulls (-want +got):\n%s", diff)
	}
	// Empty ones: the buffer stays non-nil, the vector becomes nil.
	body = cat(be32(0), be32(0), be32(0), be32(0))
	r, err = DecodeRequest(OpCreate, body)
	if err != nil {
		t.Fatal(err)
	}
	if c := r.(*CreateRequest); c.Data == nil || len(c.Data) != 0 || c.ACL != nil {
		t.Errorf("empties: %#v", c)
	}
	if got := Marshal(nil, r); !bytes.Equal(got, body) {
		t.Errorf("empties re-encode to %x", got)
	}
	if got := Marshal(nil, &GetChildrenResponse{}); !bytes.Equal(got, be32(0)) {
		t.Errorf("nil children encode to %x, want an empty vector", got)
	}
}

// TestDecodedDoesNotAlias checks that decoding copies: overwriting the
// frame afterwards changes nothing decoded.
func TestDecodedDoesNotAlias(t *testing.T) {
	for _, s := range requestSamples() {
		body := Marshal(nil, s.rec)
		got, err := DecodeRequest(s.op, body)
		if err != nil {
			t.Fatal(err)
		}
		for i := range body {
			body[i] = 0xee
		}
		if diff := cmp.Diff(s.rec, got); diff != "" {
			t.Errorf("%v changed with its frame:\n%s", s.op, diff)
		}
	}
}

func TestReadFrame(t *testing.T) {
	var stream bytes.Buffer
	f1, _ := AppendFrame(nil, &RequestHeader{Xid: 1, Type: OpPing})
	f2, _ := AppendFrame(nil, &RequestHeader{Xid: 2, Type: OpSync}, &SyncRequest{Path: "/"})
	stream.Write(f1)
	stream.Write(f2)
	stream.Write([]byte{0, 0, 0, 0}) // an empty frame is a frame

	buf := make([]byte, 0, 64)
	for i, want := range [][]byte{f1[4:], f2[4:], {}} {
		got, err := ReadFrame(&stream, buf)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %x, %v; want %x", i, got, err, want)
		}
		if len(got) > 0 && &got[0] != &buf[:1][0] {
			t.Errorf("frame %d was not read into buf", i)
		}
	}
	if _, err := ReadFrame(&stream, buf); err != io.EOF {
		t.Errorf("at the end: err %v, want io.EOF", err)
	}

	// A frame larger than buf gets a slice of its own.
	big, _ := AppendFrame(nil, &GetDataResponse{Data: make([]byte, 100)})
	got, err := ReadFrame(bytes.NewReader(big), buf)
	if err != nil || len(got) != len(big)-4 {
		t.Fatalf("big frame: %d bytes, %v", len(got), err)
	}

	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"cut in the prefix", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"cut in the body", []byte{0, 0, 0, 5, 1, 2}, io.ErrUnexpectedEOF},
		{"negative length", []byte{0xff, 0xff, 0xff, 0xfe}, ErrFrameTooLarge},
		{"one past MaxPacket", be32(MaxPacket + 1), ErrFrameTooLarge},
		{"a four-letter word", []byte("ruok"), ErrFrameTooLarge},
	} {
		if _, err := ReadFrame(bytes.NewReader(c.in), nil); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}

	// MaxPacket itself is accepted.
	max := append(be32(MaxPacket), make([]byte, MaxPacket)...)
	if got, err := ReadFrame(bytes.NewReader(max), nil); err != nil || len(got) != MaxPacket {
		t.Errorf("a frame of MaxPacket: %d bytes, %v", len(got), err)
	}
}

// TestReadFrameLimit: a frame over the limit is refused from its length
// alone, and a frame announced long but cut short holds a buffer sized
// by what arrived, not by what was announced.
func TestReadFrameLimit(t *testing.T) {
	f, _ := AppendFrame(nil, &GetDataResponse{Data: make([]byte, 100)})
	if _, err := ReadFrameLimit(bytes.NewReader(f), nil, 50); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a 100-byte frame under a limit of 50: %v, want ErrFrameTooLarge", err)
	}
	if got, err := ReadFrameLimit(bytes.NewReader(f), nil, len(f)); err != nil || !bytes.Equal(got, f[4:]) {
		t.Fatalf("a frame within the limit: %x, %v", got, err)
	}
	announced := binary.BigEndian.AppendUint32(nil, MaxPacket)
	if _, err := ReadFrame(bytes.NewReader(append(announced, 1)), nil); err != io.ErrUnexpectedEOF {
		t.Fatalf("a frame cut after one byte: %v, want io.ErrUnexpectedEOF", err)
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for range 10 {
		ReadFrame(bytes.NewReader(append(announced, 1)), nil)
	}
	runtime.ReadMemStats(&ms1)
	if grew := ms1.TotalAlloc - ms0.TotalAlloc; grew > 10*(2*frameChunk+64) {
		t.Errorf("10 frames announcing %d bytes and sending one allocated %d bytes", MaxPacket, grew)
	}
}

// refusingReader fails the test if more than the 4-byte prefix is read.
type refusingReader struct {
	t      *testing.T
	prefix []byte
}

func (r *refusingReader) Read(p []byte) (int, error) {
	if len(r.prefix) == 0 {
		r.t.Fatal("ReadFrame read past the length of an oversized frame")
	}
	n := copy(p, r.prefix)
	r.prefix = r.prefix[n:]
	return n, nil
}

func TestReadFrameRejectsBeforeReading(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadFrame(&refusingReader{t: t, prefix: be32(0x7fffffff)}, nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err %v, want ErrFrameTooLarge", err)
	}
	// The process's other goroutines allocate too: the bound is far
	// below any buffer for the frame, not zero.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
		t.Errorf("rejecting a 2 GiB frame allocated %d bytes", alloc)
	}
}

func TestAppendFrameTooLarge(t *testing.T) {
	b := []byte("keep")
	_, err := AppendFrame(b, &GetDataResponse{Data: make([]byte, MaxPacket)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err %v, want ErrFrameTooLarge", err)
	}
	// The largest data that fits: MaxPacket less the buffer's length and the Stat.
	out, err := AppendFrame(b, &GetDataResponse{Data: make([]byte, MaxPacket-4-statSize)})
	if err != nil || len(out) != len(b)+4+MaxPacket {
		t.Fatalf("%d bytes, %v", len(out), err)
	}
	if err := WriteFrame(io.Discard, &GetDataResponse{Data: make([]byte, MaxPacket)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("WriteFrame: err %v, want ErrFrameTooLarge", err)
	}
}

// TestReplyToMaxRequestFits checks MaxPacket's promise: the reply to a
// setData request of MaxBuffer bytes, a getData of the same node, fits.
func TestReplyToMaxRequestFits(t *testing.T) {
	path := "/p"
	overhead := len(Marshal(Marshal(nil, &RequestHeader{}), &SetDataRequest{Path: path, Data: []byte{}}))
	data := make([]byte, MaxBuffer-overhead)
	if _, err := AppendReply(nil, ReplyHeader{}, OpGetData, &GetDataResponse{Data: data}); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeMemory checks the bound the package documents: decoding the
// worst cases allocates at most 12 bytes per input byte. Each case has
// one element more than a power of two, so that the slice has just
// doubled.
func TestDecodeMemory(t *testing.T) {
	const n = 1<<15 + 1
	emptyStrings := cat(make([]byte, 8), be32(n), make([]byte, 4*n), be32(0), be32(0))
	var deletes, results, acls [][]byte
	for range n {
		deletes = append(deletes, be32(int32(OpDelete)), []byte{0}, be32(-1), be32(0), be32(0))
		results = append(results, be32(int32(OpDelete)), []byte{0}, be32(0))
		acls = append(acls, be32(1), be32(0), be32(0))
	}
	end := cat(be32(-1), []byte{1}, be32(-1))
	for _, c := range []struct {
		name   string
		decode func([]byte) (Record, error)
		body   []byte
	}{
		{"vector of empty strings", func(b []byte) (Record, error) { return DecodeRequest(OpSetWatches, b) }, emptyStrings},
		{"vector of empty ACLs", func(b []byte) (Record, error) { return DecodeRequest(OpSetACL, b) }, cat(be32(0), be32(n), cat(acls...), be32(0))},
		{"multi of minimal deletes", func(b []byte) (Record, error) { return DecodeRequest(OpMulti, b) }, cat(cat(deletes...), end)},
		{"multi's delete results", func(b []byte) (Record, error) { return DecodeResponse(OpMulti, b) }, cat(cat(results...), end)},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := c.decode(c.body)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		ratio := float64(alloc) / float64(len(c.body))
		t.Logf("%s: %d input bytes, %d allocated: %.1f bytes per input byte", c.name, len(c.body), alloc, ratio)
		if ratio > 12 {
			t.Errorf("%s: decoding allocated %.1f bytes per input byte, want at most 12", c.name, ratio)
		}
	}
}
