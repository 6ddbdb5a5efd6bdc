/* Cohort mqueue layout, shared by the Rust host side (crates/mq) and CUDA kernels.
 * The Rust tests parse the COHORT_MQ_* defines below and check them against the Rust layout:
 * change both together.
 *
 * Region = control block (COHORT_MQ_CONTROL_BYTES) + `slots` slots of `slot_stride` bytes.
 * Slot   = 48-byte header (one engine-boundary message: token, service, request id,
 *          deadline, arrival time) + payload.
 * Producer writes payload and the header fields, then release-stores seq = position + 1.
 * Consumer acquire-loads seq; when it equals its own position + 1 the slot is full. After
 * consuming, it publishes its position (the tail) to the control block every few messages.
 * A `len` with COHORT_MQ_SPILLED set means the payload did not fit the slot and is held on the
 * host beside the ring: only host-only rings ever carry such messages; device code treats one as
 * an error. */
#ifndef COHORT_MQUEUE_H
#define COHORT_MQUEUE_H

#include <stdint.h>

#define COHORT_MQ_CONTROL_BYTES 64
#define COHORT_MQ_TAIL_OFFSET 0
#define COHORT_MQ_SLOT_HEADER_BYTES 48
#define COHORT_MQ_SEQ_OFFSET 0
#define COHORT_MQ_LEN_OFFSET 4
#define COHORT_MQ_TOKEN_OFFSET 8
#define COHORT_MQ_SERVICE_OFFSET 12
#define COHORT_MQ_STATUS_OFFSET 14
#define COHORT_MQ_REQUEST_ID_OFFSET 16
#define COHORT_MQ_DEADLINE_OFFSET 24
#define COHORT_MQ_ARRIVED_OFFSET 32
#define COHORT_MQ_ROUTE_OFFSET 40
#define COHORT_MQ_SLOT_ALIGN 16
#define COHORT_MQ_SPILLED 2147483648u

typedef struct {
    uint32_t seq;        /* doorbell: position + 1, written last with release semantics */
    uint32_t len;        /* payload bytes in this slot (COHORT_MQ_SPILLED: held host-side) */
    uint32_t token;      /* in-flight-table token: who gets the answer */
    uint16_t service;    /* service id */
    uint16_t status;     /* 0 = ok, else a wire error code (answers) */
    uint64_t request_id; /* the client's request id, echoed in the answer */
    uint64_t deadline;   /* nanoseconds on the server's monotonic clock; 0 = none */
    uint64_t arrived;    /* when ingress read the request, same clock */
    uint64_t route;      /* engine-internal: the ring an answer goes back to (GPU TX rings
                            carry the ingress index); 0 elsewhere */
} cohort_mq_slot_header;

typedef struct {
    uint32_t tail; /* consumer position, published in batches */
    uint8_t pad[COHORT_MQ_CONTROL_BYTES - 4];
} cohort_mq_control;

#endif
