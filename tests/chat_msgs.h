/* Chat messages from JSON, for the tests: a conversation written as the
 * official encoder takes it (a JSON array of OpenAI-style message objects,
 * as the official test vectors give it) turned into the ds4_chat_msg list
 * that ds4_chat_render takes (text/chat.h).  The library itself renders
 * only the one-turn prompts of ds4's command line. */
#ifndef DS4_TEST_CHAT_MSGS_H
#define DS4_TEST_CHAT_MSGS_H

#include <stddef.h>

#include "base/err.h"
#include "ref/text/chat.h"
#include "ref/text/json.h"

/* The messages of arr.  *msgs (free() it) points into `arr`, which must
 * outlive it.  A message without a known "role", or with a non-string
 * where a string belongs, is DS4_E_ARG, naming the message and byte. */
int chat_msgs_from_json(const ds4_json *arr, ds4_chat_msg **msgs, size_t *n, ds4err *err);

#endif
