/* Cohort mqueue layout, shared by the Rust host side (crates/mq) and CUDA kernels.
 * The Rust tests parse the COHORT_MQ_* defines below and check them against the Rust layout:
 * change both together.
 *
 * Region = control block (COHORT_MQ_CONTROL_BYTES) + `slots` slots of `slot_stride` bytes.
 * Slot   = 16-byte header + payload.
 * Producer writes payload, len, token, service, status, then release-stores seq = position + 1.
 * Consumer acquire-loads seq; when it equals its own position + 1 the slot is full. After
 * consuming, it publishes its position (the tail) to the control block every few messages. */
#ifndef COHORT_MQUEUE_H
#define COHORT_MQUEUE_H

#include <stdint.h>

#define COHORT_MQ_CONTROL_BYTES 64
#define COHORT_MQ_TAIL_OFFSET 0
#define COHORT_MQ_SLOT_HEADER_BYTES 16
#define COHORT_MQ_SEQ_OFFSET 0
#define COHORT_MQ_LEN_OFFSET 4
#define COHORT_MQ_TOKEN_OFFSET 8
#define COHORT_MQ_SERVICE_OFFSET 12
#define COHORT_MQ_STATUS_OFFSET 14
#define COHORT_MQ_SLOT_ALIGN 16

typedef struct {
    uint32_t seq;     /* doorbell: position + 1, written last with release semantics */
    uint32_t len;     /* payload bytes in this slot */
    uint32_t token;   /* client-table token: who gets the answer */
    uint16_t service; /* service id */
    uint16_t status;  /* 0 = ok, else a wire error code */
} cohort_mq_slot_header;

typedef struct {
    uint32_t tail; /* consumer position, published in batches */
    uint8_t pad[COHORT_MQ_CONTROL_BYTES - 4];
} cohort_mq_control;

#endif
