package proto

import "fmt"

// An OpCode names a request's operation in its request header.
type OpCode int32

// The operation codes of ZooKeeper's client protocol.
const (
	OpNotification      OpCode = 0
	OpCreate            OpCode = 1
	OpDelete            OpCode = 2
	OpExists            OpCode = 3
	OpGetData           OpCode = 4
	OpSetData           OpCode = 5
	OpGetACL            OpCode = 6
	OpSetACL            OpCode = 7
	OpGetChildren       OpCode = 8
	OpSync              OpCode = 9
	OpPing              OpCode = 11
	OpGetChildren2      OpCode = 12
	OpCheck             OpCode = 13
	OpMulti             OpCode = 14
	OpCreate2           OpCode = 15
	OpReconfig          OpCode = 16
	OpCheckWatches      OpCode = 17
	OpRemoveWatches     OpCode = 18
	OpCreateContainer   OpCode = 19
	OpDeleteContainer   OpCode = 20
	OpCreateTTL         OpCode = 21
	OpMultiRead         OpCode = 22
	OpAuth              OpCode = 100
	OpSetWatches        OpCode = 101
	OpSASL              OpCode = 102
	OpGetEphemerals     OpCode = 103
	OpGetAllChildrenNum OpCode = 104
	OpSetWatches2       OpCode = 105
	OpAddWatch          OpCode = 106
	OpWhoAmI            OpCode = 107
	OpCreateSession     OpCode = -10
	OpCloseSession      OpCode = -11
	OpError             OpCode = -1
)

// Reserved xids: replies with these carry no answer to a request.
const (
	XidWatchEvent int32 = -1 // a watch event
	XidPing       int32 = -2 // the answer to a ping
	XidAuth       int32 = -4 // the answer to an auth packet
	XidSetWatches int32 = -8 // the answer to SetWatches
)

// A Code is the error code a reply header carries; CodeOK is success.
// Code implements error for every value but CodeOK.
type Code int32

// ZooKeeper's error codes (KeeperException.Code).
const (
	CodeOK                      Code = 0
	CodeSystemError             Code = -1
	CodeRuntimeInconsistency    Code = -2
	CodeDataInconsistency       Code = -3
	CodeConnectionLoss          Code = -4
	CodeMarshallingError        Code = -5
	CodeUnimplemented           Code = -6
	CodeOperationTimeout        Code = -7
	CodeBadArguments            Code = -8
	CodeUnknownSession          Code = -12
	CodeNewConfigNoQuorum       Code = -13
	CodeReconfigInProgress      Code = -14
	CodeAPIError                Code = -100
	CodeNoNode                  Code = -101
	CodeNoAuth                  Code = -102
	CodeBadVersion              Code = -103
	CodeNoChildrenForEphemerals Code = -108
	CodeNodeExists              Code = -110
	CodeNotEmpty                Code = -111
	CodeSessionExpired          Code = -112
	CodeInvalidCallback         Code = -113
	CodeInvalidACL              Code = -114
	CodeAuthFailed              Code = -115
	CodeSessionMoved            Code = -118
	CodeNotReadOnly             Code = -119
	CodeEphemeralOnLocalSession Code = -120
	CodeNoWatcher               Code = -121
	CodeRequestTimeout          Code = -122
	CodeReconfigDisabled        Code = -123
	CodeSessionClosedNeedsSASL  Code = -124
	CodeQuotaExceeded           Code = -125
	CodeThrottled               Code = -127
)

var codeNames = map[Code]string{
	CodeOK:                      "ok",
	CodeSystemError:             "system error",
	CodeRuntimeInconsistency:    "runtime inconsistency",
	CodeDataInconsistency:       "data inconsistency",
	CodeConnectionLoss:          "connection loss",
	CodeMarshallingError:        "marshalling error",
	CodeUnimplemented:           "unimplemented",
	CodeOperationTimeout:        "operation timeout",
	CodeBadArguments:            "bad arguments",
	CodeUnknownSession:          "unknown session",
	CodeNewConfigNoQuorum:       "new config no quorum",
	CodeReconfigInProgress:      "reconfig in progress",
	CodeAPIError:                "api error",
	CodeNoNode:                  "no node",
	CodeNoAuth:                  "not authenticated",
	CodeBadVersion:              "bad version",
	CodeNoChildrenForEphemerals: "no children for ephemerals",
	CodeNodeExists:              "node exists",
	CodeNotEmpty:                "directory not empty",
	CodeSessionExpired:          "session expired",
	CodeInvalidCallback:         "invalid callback",
	CodeInvalidACL:              "invalid ACL",
	CodeAuthFailed:              "authentication failed",
	CodeSessionMoved:            "session moved",
	CodeNotReadOnly:             "not a read-only call",
	CodeEphemeralOnLocalSession: "ephemeral on local session",
	CodeNoWatcher:               "no watcher",
	CodeRequestTimeout:          "request timeout",
	CodeReconfigDisabled:        "reconfig disabled",
	CodeSessionClosedNeedsSASL:  "session closed: SASL authentication required",
	CodeQuotaExceeded:           "quota exceeded",
	CodeThrottled:               "throttled",
}

func (c Code) Error() string {
	if s, ok := codeNames[c]; ok {
		return "zookeeper: " + s
	}
	return fmt.Sprintf("zookeeper: error code %d", int32(c))
}

// CreateMode is a create request's flags: ephemeral, sequential,
// container, with a time to live.
type CreateMode int32

// ZooKeeper's create modes.
const (
	ModePersistent                  CreateMode = 0
	ModeEphemeral                   CreateMode = 1
	ModePersistentSequential        CreateMode = 2
	ModeEphemeralSequential         CreateMode = 3
	ModeContainer                   CreateMode = 4
	ModePersistentWithTTL           CreateMode = 5
	ModePersistentSequentialWithTTL CreateMode = 6
)

// Ephemeral reports whether nodes made in mode m end with their session.
func (m CreateMode) Ephemeral() bool { return m == ModeEphemeral || m == ModeEphemeralSequential }

// Sequential reports whether mode m appends a sequence number to the name.
func (m CreateMode) Sequential() bool {
	return m == ModePersistentSequential || m == ModeEphemeralSequential || m == ModePersistentSequentialWithTTL
}

// Perms are an ACL entry's permissions, a bit set.
type Perms int32

// ZooKeeper's permissions.
const (
	PermRead   Perms = 1 << 0
	PermWrite  Perms = 1 << 1
	PermCreate Perms = 1 << 2
	PermDelete Perms = 1 << 3
	PermAdmin  Perms = 1 << 4
	PermAll    Perms = PermRead | PermWrite | PermCreate | PermDelete | PermAdmin
)

// EventType is what a watch event reports.
type EventType int32

// ZooKeeper's event types (Watcher.Event.EventType).
const (
	EventNone                   EventType = -1
	EventNodeCreated            EventType = 1
	EventNodeDeleted            EventType = 2
	EventNodeDataChanged        EventType = 3
	EventNodeChildrenChanged    EventType = 4
	EventDataWatchRemoved       EventType = 5
	EventChildWatchRemoved      EventType = 6
	EventPersistentWatchRemoved EventType = 7
)

// State is a session's state as a watch event reports it
// (Watcher.Event.KeeperState).
type State int32

// ZooKeeper's keeper states.
const (
	StateDisconnected      State = 0
	StateSyncConnected     State = 3
	StateAuthFailed        State = 4
	StateConnectedReadOnly State = 5
	StateSaslAuthenticated State = 6
	StateExpired           State = -112
	StateClosed            State = 7
)

// AddWatchMode is an addWatch request's kind of persistent watch.
type AddWatchMode int32

// The modes of addWatch.
const (
	AddWatchPersistent          AddWatchMode = 0
	AddWatchPersistentRecursive AddWatchMode = 1
)

// WatcherType selects the watches checkWatches and removeWatches act on.
type WatcherType int32

// The kinds of watcher.
const (
	WatcherChildren WatcherType = 1
	WatcherData     WatcherType = 2
	WatcherAny      WatcherType = 3
)
