/* Tests for ref/text/chat.c, the DeepSeek V4 chat renderer.
 *
 * Rendered text is compared with
 *   - the official encoder's published fixtures (DeepSeek-V4-Flash
 *     encoding/tests/test_{input,output}_{1..4}, at the snapshot vendored by
 *     AI-Hypercomputer/maxtext 8ddb0a60): outputs 1-4 verbatim (sha256 of
 *     output 1 9b366d9d2eac842a..., of output 3 b3b1cd8748b7b90d...), inputs
 *     3 and 4 verbatim.  Inputs 1 and 2 are not available here; they are
 *     rebuilt from the outputs and from the assertions of the published test
 *     (test_encoding_dsv4.py), and the official encoder maps them to the
 *     published outputs byte for byte;
 *   - expected strings derived by hand from encoding_dsv4.py for the cases
 *     ds4ref's command line and the encoder's rules produce.
 * Token ids are compared with hand-derived sequences on a tiny vocabulary,
 * and (when ../shared is present) with ids from the Hugging Face Rust
 * tokenizer (npm "tokenizers" 0.23.2) on the DeepSeek vocabulary with ten
 * placeholder tokens renamed to the V4 specials, as described at
 * v4like_setup. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_msgs.h"
#include "ref/text/chat.h"
#include "ref/text/json.h"
#include "testutil.h"
#include "xzvocab.h"

#define BOS "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define EOS "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
#define USER "<\xEF\xBD\x9CUser\xEF\xBD\x9C>"
#define ASSISTANT "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>"
#define DSML "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C"

/* ------------------------------------------------- official fixtures */

static const char in1_tools[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get"
    " the weather for a specific location\", \"parameters\": {\"type\": \"object\", \"propertie"
    "s\": {\"location\": {\"type\": \"string\", \"description\": \"The city name\"}, \"unit\": "
    "{\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"], \"description\": \"Tempera"
    "ture unit\"}}, \"required\": [\"location\"]}}}, {\"type\": \"function\", \"function\": {\""
    "name\": \"search\", \"description\": \"Search the web for information\", \"parameters\": {"
    "\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\", \"description\": "
    "\"Search query\"}, \"num_results\": {\"type\": \"integer\", \"description\": \"Number of r"
    "esults to return\"}}, \"required\": [\"query\"]}}}]";

static const char in1_messages[] =
    "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user"
    "\", \"content\": \"What's the weather in Beijing?\"}, {\"role\": \"assistant\", \"content"
    "\": \"\", \"reasoning_content\": \"The user wants to know the weather in Beijing. I should"
    " use the get_weather tool.\", \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\""
    ", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\": \\\"Beijin"
    "g\\\", \\\"unit\\\": \\\"celsius\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call"
    "_1\", \"content\": \"{\\\"temperature\\\": 22, \\\"condition\\\": \\\"sunny\\\", \\\"humid"
    "ity\\\": 45}\"}, {\"role\": \"assistant\", \"content\": \"The weather in Beijing is curren"
    "tly sunny with a temperature of 22°C and 45% humidity.\", \"reasoning_content\": \"Got the"
    " weather data. Let me format a nice response.\"}]";

static const char in2[] =
    "[{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, {\"role\": \"user"
    "\", \"content\": \"Hello\"}, {\"role\": \"assistant\", \"reasoning_content\": \"The user s"
    "aid hello, I should greet back.\", \"content\": \"Hi there! How can I help you?\"}, {\"rol"
    "e\": \"user\", \"content\": \"What is the capital of France?\"}, {\"role\": \"assistant\","
    " \"reasoning_content\": \"The user asks about the capital of France. It is Paris.\", \"con"
    "tent\": \"The capital of France is Paris.\"}]";

static const char in3[] =
    "[\n"
    "  {\n"
    "    \"role\": \"system\",\n"
    "    \"content\": \"该助手为DeepSeek，由深度求索公司创造。\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"latest_reminder\",\n"
    "    \"content\": \"2026-02-21,星期六,广州,App,中文\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"developer\",\n"
    "    \"content\": \"小柴胡冲剂和布洛芬能一起吃吗？\\n\\nCITATION FORMAT: 【{cursor_id}†L{start_line_id}(-L{"
    "end_line_id})?】\",\n"
    "    \"tools\": [\n"
    "      {\n"
    "        \"type\": \"function\",\n"
    "        \"function\": {\n"
    "          \"name\": \"search\",\n"
    "          \"description\": \"Web search. Split multiple queries with '||'.\",\n"
    "          \"parameters\": {\n"
    "            \"type\": \"object\",\n"
    "            \"properties\": {\n"
    "              \"queries\": {\n"
    "                \"type\": \"string\",\n"
    "                \"description\": \"query1||query2\"\n"
    "              }\n"
    "            },\n"
    "            \"required\": [\n"
    "              \"queries\"\n"
    "            ],\n"
    "            \"additionalProperties\": false,\n"
    "            \"$schema\": \"http://json-schema.org/draft-07/schema#\"\n"
    "          }\n"
    "        }\n"
    "      },\n"
    "      {\n"
    "        \"type\": \"function\",\n"
    "        \"function\": {\n"
    "          \"name\": \"open\",\n"
    "          \"description\": \"Batch open IDs (format 【{id}†...】) or URLs.\",\n"
    "          \"parameters\": {\n"
    "            \"type\": \"object\",\n"
    "            \"properties\": {\n"
    "              \"open_list\": {\n"
    "                \"type\": \"array\",\n"
    "                \"items\": {\n"
    "                  \"type\": \"object\",\n"
    "                  \"properties\": {\n"
    "                    \"id\": {\n"
    "                      \"description\": \"ID or URL\",\n"
    "                      \"anyOf\": [\n"
    "                        {\n"
    "                          \"type\": \"integer\"\n"
    "                        },\n"
    "                        {\n"
    "                          \"type\": \"string\"\n"
    "                        }\n"
    "                      ],\n"
    "                      \"default\": -1\n"
    "                    },\n"
    "                    \"cursor\": {\n"
    "                      \"type\": \"integer\",\n"
    "                      \"description\": \"\",\n"
    "                      \"default\": -1\n"
    "                    },\n"
    "                    \"loc\": {\n"
    "                      \"type\": \"integer\",\n"
    "                      \"description\": \"Start line\",\n"
    "                      \"default\": -1\n"
    "                    },\n"
    "                    \"num_lines\": {\n"
    "                      \"type\": \"integer\",\n"
    "                      \"description\": \"\",\n"
    "                      \"default\": -1\n"
    "                    },\n"
    "                    \"view_source\": {\n"
    "                      \"type\": \"boolean\",\n"
    "                      \"description\": \"\",\n"
    "                      \"default\": false\n"
    "                    }\n"
    "                  },\n"
    "                  \"additionalProperties\": false\n"
    "                },\n"
    "                \"description\": \"\"\n"
    "              }\n"
    "            },\n"
    "            \"required\": [\n"
    "              \"open_list\"\n"
    "            ],\n"
    "            \"additionalProperties\": false,\n"
    "            \"$schema\": \"http://json-schema.org/draft-07/schema#\"\n"
    "          }\n"
    "        }\n"
    "      },\n"
    "      {\n"
    "        \"type\": \"function\",\n"
    "        \"function\": {\n"
    "          \"name\": \"find\",\n"
    "          \"description\": \"Find exact text pattern in pages.\",\n"
    "          \"parameters\": {\n"
    "            \"type\": \"object\",\n"
    "            \"properties\": {\n"
    "              \"find_list\": {\n"
    "                \"type\": \"array\",\n"
    "                \"items\": {\n"
    "                  \"type\": \"object\",\n"
    "                  \"properties\": {\n"
    "                    \"pattern\": {\n"
    "                      \"type\": \"string\",\n"
    "                      \"description\": \"\"\n"
    "                    },\n"
    "                    \"cursor\": {\n"
    "                      \"type\": \"integer\",\n"
    "                      \"description\": \"\",\n"
    "                      \"default\": -1\n"
    "                    }\n"
    "                  },\n"
    "                  \"required\": [\n"
    "                    \"pattern\"\n"
    "                  ],\n"
    "                  \"additionalProperties\": false\n"
    "                },\n"
    "                \"description\": \"\"\n"
    "              }\n"
    "            },\n"
    "            \"required\": [\n"
    "              \"find_list\"\n"
    "            ],\n"
    "            \"additionalProperties\": false,\n"
    "            \"$schema\": \"http://json-schema.org/draft-07/schema#\"\n"
    "          }\n"
    "        }\n"
    "      }\n"
    "    ]\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"assistant\",\n"
    "    \"content\": \"\",\n"
    "    \"reasoning_content\": \"用户想知道小柴胡冲剂和布洛芬能否一起服用。\",\n"
    "    \"tool_calls\": [\n"
    "      {\n"
    "        \"type\": \"function\",\n"
    "        \"function\": {\n"
    "          \"name\": \"search\",\n"
    "          \"arguments\": \"{\\\"queries\\\": \\\"小柴胡冲剂 布洛芬 相互作用 一起吃\\\"}\"\n"
    "        }\n"
    "      }\n"
    "    ]\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"tool\",\n"
    "    \"content\": \"[0]\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"assistant\",\n"
    "    \"content\": \"请及时就医。\",\n"
    "    \"reasoning_content\": \"现在开始组织回答。\",\n"
    "    \"tool_calls\": []\n"
    "  }\n"
    "]\n";

static const char in4[] =
    "[\n"
    "  {\n"
    "    \"role\": \"system\",\n"
    "    \"content\": \"该助手为DeepSeek-V3，由深度求索公司创造。\\n今天是2025年10月17日，星期五。\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"latest_reminder\",\n"
    "    \"content\": \"2024-11-15,上海市,App,中文\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"user\",\n"
    "    \"content\": \"热海大滚锅是世界著名温泉吗\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"assistant\",\n"
    "    \"content\": \"关于热海大滚锅是否是世界著名温泉，可以这样总结：它在**中国乃至全球的地热奇观中占有重要地位**，但“世界著名”的称号更侧重于它作为**独特的"
    "地质现象和旅游景点**，而非普遍的温泉疗养体验。\\n\\n为了让你快速了解，我整理了一个简要的表格：\\n\\n| 维度 | 热海大滚锅的地位与特点 |\\n| :--- | :"
    "--- |\\n| **地质奇观** | **世界罕见**的高温地热系统，泉眼多、水温高、形态多样。 |\\n| **国内声誉** | **中国三大地热区之一**，**国家5A级旅"
    "游景区**，自古闻名（徐霞客曾游历并记载）。 |\\n| **国际知名度** | 在一些旅游平台被提及为“世界六大温泉”之一，但此说法流传不广，其国际声誉更多建立在地质独特性上。 "
    "|\\n| **核心体验** | **观赏地热奇观**（如97℃沸腾的“大滚锅”）、**体验温泉煮鸡蛋**。 |\\n\\n### 💡 游玩攻略与温馨提示\\n\\n如果你计划前往"
    "热海大滚锅，这里有一些实用信息供你参考：\\n\\n- **门票与开放时间**：\\n    - **门票**：景区门票约为**50元/人**。如果选择包含温泉沐浴的套餐，价格会更"
    "高，例如约**288元**。\\n    - **开放时间**：景区一般**08:00-18:00**开放，但具体时间可能变动，建议提前核实。\\n\\n- **特色体验**："
    "\\n    - **温泉煮鸡蛋**：这几乎是必试项目。可以在景区门口购买用草绳串起的生鸡蛋（约5-8元/串），然后到“大滚锅”旁的指定区域蒸煮，几分钟便可熟食，趣味十足。\\n "
    "   - **金汤足浴**：可以直接用从“大滚锅”流出的温泉水泡脚，缓解旅途疲劳。\\n\\n- **注意事项**：\\n    - **安全第一**：“大滚锅”水温极高，务必遵守"
    "游览规则，在指定区域内观赏，切勿随意触碰泉水。\\n    - **规划行程**：建议为热海景区预留**3-4小时**的游览时间。景区内步道不走回头路，出入口有观光车接送。\\n"
    "\\n希望这些信息能帮助你更好地了解热海大滚锅。如果你对腾冲的其他景点或者行程规划有更多疑问，我很乐意提供进一步的信息。\",\n"
    "    \"mask\": 1\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"user\",\n"
    "    \"content\": \"世界著名温泉有哪些\",\n"
    "    \"task\": \"action\"\n"
    "  },\n"
    "  {\n"
    "    \"role\": \"assistant\",\n"
    "    \"content\": \"Search\"\n"
    "  }\n"
    "]\n";

static const char out1[] =
    "<｜begin▁of▁sentence｜>You are a helpful assistant.\n"
    "\n"
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools"
    " by writing a \"<｜DSML｜tool_calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜pa"
    "rameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types"
    " (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"fal"
    "se\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasonin"
    "g inside <think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n"
    "{\"name\": \"get_weather\", \"description\": \"Get the weather for a specific location\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string"
    "\", \"description\": \"The city name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"cel"
    "sius\", \"fahrenheit\"], \"description\": \"Temperature unit\"}}, \"required\": [\"locatio"
    "n\"]}}\n"
    "{\"name\": \"search\", \"description\": \"Search the web for information\", \"parameters\""
    ": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\", \"description"
    "\": \"Search query\"}, \"num_results\": {\"type\": \"integer\", \"description\": \"Number "
    "of results to return\"}}, \"required\": [\"query\"]}}\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n"
    "<｜User｜>What's the weather in Beijing?<｜Assistant｜><think>The user wants to know the weath"
    "er in Beijing. I should use the get_weather tool.</think>\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temperature\": 22, \"conditi"
    "on\": \"sunny\", \"humidity\": 45}</tool_result><｜Assistant｜><think>Got the weather data. "
    "Let me format a nice response.</think>The weather in Beijing is currently sunny with a tem"
    "perature of 22°C and 45% humidity.<｜end▁of▁sentence｜>";

static const char out2[] =
    "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi ther"
    "e! How can I help you?<｜end▁of▁sentence｜><｜User｜>What is the capital of France?<｜Assistant"
    "｜><think>The user asks about the capital of France. It is Paris.</think>The capital of Fra"
    "nce is Paris.<｜end▁of▁sentence｜>";

static const char out3[] =
    "<｜begin▁of▁sentence｜>该助手为DeepSeek，由深度求索公司创造。<｜latest_reminder｜>2026-02-21,星期六,广州,App,中文<｜U"
    "ser｜>小柴胡冲剂和布洛芬能一起吃吗？\n"
    "\n"
    "CITATION FORMAT: 【{cursor_id}†L{start_line_id}(-L{end_line_id})?】\n"
    "\n"
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools"
    " by writing a \"<｜DSML｜tool_calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜pa"
    "rameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types"
    " (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"fal"
    "se\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasonin"
    "g inside <think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n"
    "{\"name\": \"search\", \"description\": \"Web search. Split multiple queries with '||'.\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"queries\": {\"type\": \"string"
    "\", \"description\": \"query1||query2\"}}, \"required\": [\"queries\"], \"additionalProper"
    "ties\": false, \"$schema\": \"http://json-schema.org/draft-07/schema#\"}}\n"
    "{\"name\": \"open\", \"description\": \"Batch open IDs (format 【{id}†...】) or URLs.\", \"p"
    "arameters\": {\"type\": \"object\", \"properties\": {\"open_list\": {\"type\": \"array\", "
    "\"items\": {\"type\": \"object\", \"properties\": {\"id\": {\"description\": \"ID or URL\""
    ", \"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], \"default\": -1}, \"cursor"
    "\": {\"type\": \"integer\", \"description\": \"\", \"default\": -1}, \"loc\": {\"type\": "
    "\"integer\", \"description\": \"Start line\", \"default\": -1}, \"num_lines\": {\"type\": "
    "\"integer\", \"description\": \"\", \"default\": -1}, \"view_source\": {\"type\": \"boolea"
    "n\", \"description\": \"\", \"default\": false}}, \"additionalProperties\": false}, \"desc"
    "ription\": \"\"}}, \"required\": [\"open_list\"], \"additionalProperties\": false, \"$sche"
    "ma\": \"http://json-schema.org/draft-07/schema#\"}}\n"
    "{\"name\": \"find\", \"description\": \"Find exact text pattern in pages.\", \"parameters"
    "\": {\"type\": \"object\", \"properties\": {\"find_list\": {\"type\": \"array\", \"items\""
    ": {\"type\": \"object\", \"properties\": {\"pattern\": {\"type\": \"string\", \"descriptio"
    "n\": \"\"}, \"cursor\": {\"type\": \"integer\", \"description\": \"\", \"default\": -1}}, "
    "\"required\": [\"pattern\"], \"additionalProperties\": false}, \"description\": \"\"}}, \""
    "required\": [\"find_list\"], \"additionalProperties\": false, \"$schema\": \"http://json-s"
    "chema.org/draft-07/schema#\"}}\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n"
    "<｜Assistant｜><think>用户想知道小柴胡冲剂和布洛芬能否一起服用。</think>\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"search\">\n"
    "<｜DSML｜parameter name=\"queries\" string=\"true\">小柴胡冲剂 布洛芬 相互作用 一起吃</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>[0]</tool_result><｜Assistant｜><"
    "think>现在开始组织回答。</think>请及时就医。<｜end▁of▁sentence｜>";

static const char out4[] =
    "<｜begin▁of▁sentence｜>该助手为DeepSeek-V3，由深度求索公司创造。\n"
    "今天是2025年10月17日，星期五。<｜latest_reminder｜>2024-11-15,上海市,App,中文<｜User｜>热海大滚锅是世界著名温泉吗<｜Assistan"
    "t｜></think>关于热海大滚锅是否是世界著名温泉，可以这样总结：它在**中国乃至全球的地热奇观中占有重要地位**，但“世界著名”的称号更侧重于它作为**独特的地质现象和旅游景"
    "点**，而非普遍的温泉疗养体验。\n"
    "\n"
    "为了让你快速了解，我整理了一个简要的表格：\n"
    "\n"
    "| 维度 | 热海大滚锅的地位与特点 |\n"
    "| :--- | :--- |\n"
    "| **地质奇观** | **世界罕见**的高温地热系统，泉眼多、水温高、形态多样。 |\n"
    "| **国内声誉** | **中国三大地热区之一**，**国家5A级旅游景区**，自古闻名（徐霞客曾游历并记载）。 |\n"
    "| **国际知名度** | 在一些旅游平台被提及为“世界六大温泉”之一，但此说法流传不广，其国际声誉更多建立在地质独特性上。 |\n"
    "| **核心体验** | **观赏地热奇观**（如97℃沸腾的“大滚锅”）、**体验温泉煮鸡蛋**。 |\n"
    "\n"
    "### 💡 游玩攻略与温馨提示\n"
    "\n"
    "如果你计划前往热海大滚锅，这里有一些实用信息供你参考：\n"
    "\n"
    "- **门票与开放时间**：\n"
    "    - **门票**：景区门票约为**50元/人**。如果选择包含温泉沐浴的套餐，价格会更高，例如约**288元**。\n"
    "    - **开放时间**：景区一般**08:00-18:00**开放，但具体时间可能变动，建议提前核实。\n"
    "\n"
    "- **特色体验**：\n"
    "    - **温泉煮鸡蛋**：这几乎是必试项目。可以在景区门口购买用草绳串起的生鸡蛋（约5-8元/串），然后到“大滚锅”旁的指定区域蒸煮，几分钟便可熟食，趣味十足。\n"
    "    - **金汤足浴**：可以直接用从“大滚锅”流出的温泉水泡脚，缓解旅途疲劳。\n"
    "\n"
    "- **注意事项**：\n"
    "    - **安全第一**：“大滚锅”水温极高，务必遵守游览规则，在指定区域内观赏，切勿随意触碰泉水。\n"
    "    - **规划行程**：建议为热海景区预留**3-4小时**的游览时间。景区内步道不走回头路，出入口有观光车接送。\n"
    "\n"
    "希望这些信息能帮助你更好地了解热海大滚锅。如果你对腾冲的其他景点或者行程规划有更多疑问，我很乐意提供进一步的信息。<｜end▁of▁sentence｜><｜User｜>世界著名温泉"
    "有哪些<｜Assistant｜></think><｜action｜>Search<｜end▁of▁sentence｜>";

/* Render a JSON message list; `tools` (if any) is attached to the first
 * message, as the published test does for case 1. */
static void render_json(const char *messages, const char *tools, const ds4_chat_opts *o,
                        ds4_buf *out) {
    ds4_json_doc *doc, *tdoc = NULL;
    ds4err err = {0};
    if (ds4_json_parse(messages, strlen(messages), "messages", &doc, &err)) fail_msg("%s", err.msg);
    if (tools && ds4_json_parse(tools, strlen(tools), "tools", &tdoc, &err)) fail_msg("%s", err.msg);
    ds4_chat_msg *msgs;
    size_t n;
    if (chat_msgs_from_json(ds4_json_root(doc), &msgs, &n, &err)) fail_msg("%s", err.msg);
    if (tools) msgs[0].tools = ds4_json_root(tdoc);
    if (ds4_chat_render(msgs, n, o, out, &err)) fail_msg("render: %s", err.msg);
    free(msgs);
    ds4_json_free(doc);
    ds4_json_free(tdoc);
}

static void expect_render(const char *messages, const char *tools, const ds4_chat_opts *o,
                          const char *want) {
    ds4_buf out = {0};
    render_json(messages, tools, o, &out);
    if (out.len != strlen(want) || memcmp(out.p, want, out.len) != 0) {
        size_t i = 0;
        while (i < out.len && want[i] && out.p[i] == want[i]) i++;
        fail_msg("rendering differs at byte %zu:\n got  \"%.80s\"\n want \"%.80s\"", i,
                 out.p + i, want + i);
    }
    ds4_buf_free(&out);
}

static const ds4_chat_opts chat_mode = {0};
static const ds4_chat_opts thinking_mode = {.thinking = true};

static void test_official_fixture_1(void **state) {
    (void)state;
    expect_render(in1_messages, in1_tools, &thinking_mode, out1);
}

static void test_official_fixture_2(void **state) {
    (void)state;
    expect_render(in2, NULL, &thinking_mode, out2);
}

static void test_official_fixture_3(void **state) {
    (void)state;
    expect_render(in3, NULL, &thinking_mode, out3);
}

static void test_official_fixture_4(void **state) {
    (void)state;
    expect_render(in4, NULL, &chat_mode, out4);
}

/* ------------------------------------------- hand-derived renderings */

static void test_render_turns(void **state) {
    (void)state;
    const char *conv = "[{\"role\":\"user\",\"content\":\"a\"},"
                       "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning_content\":\"r1\"},"
                       "{\"role\":\"user\",\"content\":\"c\"}]";
    /* Chat mode: every assistant prompt ends in </think>, reasoning unused. */
    expect_render(conv, NULL, &chat_mode,
                  BOS USER "a" ASSISTANT "</think>b" EOS USER "c" ASSISTANT "</think>");
    /* Thinking, dropping old reasoning (the default). */
    expect_render(conv, NULL, &thinking_mode,
                  BOS USER "a" ASSISTANT "</think>b" EOS USER "c" ASSISTANT "<think>");
    /* Thinking, keeping it. */
    ds4_chat_opts keep = {.thinking = true, .keep_thinking = true};
    expect_render(conv, NULL, &keep,
                  BOS USER "a" ASSISTANT "<think>r1</think>b" EOS USER "c" ASSISTANT "<think>");
    /* No BOS on request. */
    ds4_chat_opts nobos = {.no_bos = true};
    expect_render("[{\"role\":\"user\",\"content\":\"a\"}]", NULL, &nobos,
                  USER "a" ASSISTANT "</think>");
    /* Consecutive user messages form one turn, joined by a blank line. */
    expect_render("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]",
                  NULL, &chat_mode, BOS USER "a\n\nb" ASSISTANT "</think>");
    /* Developer turns before the last user turn go when dropping thinking. */
    expect_render("[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"user\",\"content\":\"a\"},"
                  "{\"role\":\"assistant\",\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"}]",
                  NULL, &thinking_mode,
                  BOS USER "a" ASSISTANT "</think>b" EOS USER "c" ASSISTANT "<think>");
    /* latest_reminder with no content prints Python's None. */
    expect_render("[{\"role\":\"latest_reminder\"},{\"role\":\"user\",\"content\":\"a\"}]", NULL,
                  &chat_mode,
                  BOS "<\xEF\xBD\x9Clatest_reminder\xEF\xBD\x9C>None" USER "a" ASSISTANT "</think>");
    /* wo_eos leaves the assistant turn open. */
    expect_render("[{\"role\":\"user\",\"content\":\"a\"},"
                  "{\"role\":\"assistant\",\"content\":\"part\",\"wo_eos\":true}]",
                  NULL, &chat_mode, BOS USER "a" ASSISTANT "</think>part");
    /* A task token replaces the assistant prompt, and the answer after it
     * has no thinking part. */
    expect_render("[{\"role\":\"user\",\"content\":\"q\",\"task\":\"query\"},"
                  "{\"role\":\"assistant\",\"content\":\"ans\",\"reasoning_content\":\"r\"}]",
                  NULL, &thinking_mode, BOS USER "q<\xEF\xBD\x9Cquery\xEF\xBD\x9C>ans" EOS);
    /* A tool result given as a list of blocks. */
    expect_render("[{\"role\":\"tool\",\"content\":[{\"type\":\"text\",\"text\":\"t1\"},{\"type\":\"image\"}]}]",
                  NULL, &chat_mode,
                  BOS USER "<tool_result>t1\n\n[Unsupported image]</tool_result>" ASSISTANT "</think>");
    /* response_format, dumped the way Python's json.dumps does (1.50 -> 1.5). */
    expect_render("[{\"role\":\"system\",\"content\":\"S\",\"response_format\":{\"type\":\"json_object\",\"n\":1.50}},"
                  "{\"role\":\"user\",\"content\":\"x\"}]",
                  NULL, &chat_mode,
                  BOS "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema "
                  "to reply:\n{\"type\": \"json_object\", \"n\": 1.5}" USER "x" ASSISTANT "</think>");
}

/* The reasoning-effort prompts, as each release's encoding_dsv4.py writes
 * them before the first message in thinking mode: the first release's
 * REASONING_EFFORT_MAX for "max" only; 0731's REASONING_EFFORT_PROMPTS
 * ("low": none, "high": the first release's max text, "max": its own),
 * copied here from the 0731 encoder. */
#define ABSOLUTE_MAX                                                                              \
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"                           \
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "    \
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "  \
    "edge cases, and adversarial scenarios.\n"                                                    \
    "Explicitly write out your entire deliberation process, documenting every intermediate "      \
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "   \
    "is left unchecked.\n\n"
#define BEYOND_MAX                                                                                \
    "Reasoning Effort: Beyond maximum \xE2\x80\x94 exhaustive, relentless, and uncompromising.\n"  \
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "     \
    "exhaustively decompose the problem into its most fundamental components, trace every "      \
    "causal chain to its root, and resolve the underlying cause rather than any surface "         \
    "symptom.\n"                                                                                  \
    "Do not stop reasoning until you have independently verified the solution from multiple "     \
    "angles and are certain that no assumption remains unchecked and no error remains "           \
    "undiscovered.\n\n"

static void expect_refused(const char *messages, const ds4_chat_opts *o, const char *needle) {
    ds4_json_doc *doc;
    ds4err err = {0};
    if (ds4_json_parse(messages, strlen(messages), "messages", &doc, &err)) fail_msg("%s", err.msg);
    ds4_chat_msg *msgs;
    size_t n;
    if (chat_msgs_from_json(ds4_json_root(doc), &msgs, &n, &err)) fail_msg("%s", err.msg);
    ds4_buf out = {0};
    assert_int_equal(ds4_chat_render(msgs, n, o, &out, &err), -1);
    assert_int_equal(err.code, DS4_E_ARG);
    if (!strstr(err.msg, needle)) fail_msg("\"%s\" lacks \"%s\"", err.msg, needle);
    ds4_buf_free(&out);
    free(msgs);
    ds4_json_free(doc);
}

static void test_render_efforts(void **state) {
    (void)state;
    const char *sys_user = "[{\"role\":\"system\",\"content\":\"S\"},"
                           "{\"role\":\"user\",\"content\":\"q\"}]";
    const char *user = "[{\"role\":\"user\",\"content\":\"q\"}]";
    static const struct {
        ds4_chat_release release;
        ds4_chat_effort effort;
        bool thinking;
        const char *want;   /* after BOS, before the system text */
    } cases[] = {
        {DS4_CHAT_V4, DS4_EFFORT_DEFAULT, true, ""},
        {DS4_CHAT_V4, DS4_EFFORT_HIGH, true, ""},
        {DS4_CHAT_V4, DS4_EFFORT_MAX, true, ABSOLUTE_MAX},
        {DS4_CHAT_V4, DS4_EFFORT_MAX, false, ""},
        {DS4_CHAT_V4_0731, DS4_EFFORT_DEFAULT, true, ""},
        {DS4_CHAT_V4_0731, DS4_EFFORT_LOW, true, ""},
        {DS4_CHAT_V4_0731, DS4_EFFORT_HIGH, true, ABSOLUTE_MAX},
        {DS4_CHAT_V4_0731, DS4_EFFORT_MAX, true, BEYOND_MAX},
        {DS4_CHAT_V4_0731, DS4_EFFORT_MAX, false, ""},
        {DS4_CHAT_V4_0731, DS4_EFFORT_LOW, false, ""},
    };
    char want[2048];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ds4_chat_opts o = {.thinking = cases[i].thinking, .effort = cases[i].effort,
                           .release = cases[i].release};
        const char *end = cases[i].thinking ? ASSISTANT "<think>" : ASSISTANT "</think>";
        snprintf(want, sizeof(want), "%s%sS%sq%s", BOS, cases[i].want, USER, end);
        expect_render(sys_user, NULL, &o, want);
        /* Before the first message, whatever its role. */
        snprintf(want, sizeof(want), "%s%s%sq%s", BOS, cases[i].want, USER, end);
        expect_render(user, NULL, &o, want);
    }
    /* The first release's encoder asserts an effort in (max, None, high),
     * in chat mode too. */
    ds4_chat_opts low = {.thinking = true, .effort = DS4_EFFORT_LOW};
    expect_refused(user, &low, "reasoning effort \"low\"");
    low.thinking = false;
    expect_refused(user, &low, "0731");
    ds4_chat_effort e;
    assert_int_equal(ds4_chat_effort_parse("high", &e), 0);
    assert_int_equal(e, DS4_EFFORT_HIGH);
    assert_int_equal(ds4_chat_effort_parse("medium", &e), -1);
    assert_int_equal(ds4_chat_effort_parse(NULL, &e), -1);
}

/* Tool calls in DSML, and tool results put back in call order. */
static void test_render_tool_calls(void **state) {
    (void)state;
    expect_render(
        "[{\"role\":\"user\",\"content\":\"go\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\": 1}\"}},"
        "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"oops\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"R2\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"R1\"},"
        "{\"role\":\"user\",\"content\":\"next\"}]",
        NULL, &chat_mode,
        BOS USER "go" ASSISTANT "</think>\n\n<" DSML "tool_calls>\n"
        "<" DSML "invoke name=\"f\">\n<" DSML "parameter name=\"x\" string=\"false\">1</" DSML "parameter>\n"
        "</" DSML "invoke>\n"
        "<" DSML "invoke name=\"g\">\n<" DSML "parameter name=\"arguments\" string=\"true\">oops</" DSML
        "parameter>\n</" DSML "invoke>\n"
        "</" DSML "tool_calls>" EOS
        USER "<tool_result>R1</tool_result>\n\n<tool_result>R2</tool_result>\n\nnext" ASSISTANT "</think>");
}

/* Argument values are printed as Python prints them: repr() for floats
 * (shortest digits; exponent form below 1e-4 and from 1e16; at the power of
 * two 2^554 the shortest form is above the value), ints as written except
 * -0, and a repeated key keeps its first place and its last value. */
static void test_render_python_values(void **state) {
    (void)state;
    ds4_chat_opts o = {.no_bos = true};
    expect_render(
        "[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":"
        "\"{\\\"a\\\": 1E16, \\\"b\\\": 0.00001, \\\"c\\\": 1e-4, \\\"d\\\": 123456789.000, "
        "\\\"e\\\": 5.8968162887836583e166, \\\"f\\\": -0.0, \\\"g\\\": 1e22, \\\"h\\\": 0.1, "
        "\\\"i\\\": 1e2, \\\"j\\\": -0, \\\"k\\\": 12345678901234567890, \\\"a\\\": \\\"dup\\\"}\"}}]}]",
        NULL, &o,
        "\n\n<" DSML "tool_calls>\n<" DSML "invoke name=\"f\">\n"
        "<" DSML "parameter name=\"a\" string=\"true\">dup</" DSML "parameter>\n"
        "<" DSML "parameter name=\"b\" string=\"false\">1e-05</" DSML "parameter>\n"
        "<" DSML "parameter name=\"c\" string=\"false\">0.0001</" DSML "parameter>\n"
        "<" DSML "parameter name=\"d\" string=\"false\">123456789.0</" DSML "parameter>\n"
        "<" DSML "parameter name=\"e\" string=\"false\">5.896816288783659e+166</" DSML "parameter>\n"
        "<" DSML "parameter name=\"f\" string=\"false\">-0.0</" DSML "parameter>\n"
        "<" DSML "parameter name=\"g\" string=\"false\">1e+22</" DSML "parameter>\n"
        "<" DSML "parameter name=\"h\" string=\"false\">0.1</" DSML "parameter>\n"
        "<" DSML "parameter name=\"i\" string=\"false\">100.0</" DSML "parameter>\n"
        "<" DSML "parameter name=\"j\" string=\"false\">0</" DSML "parameter>\n"
        "<" DSML "parameter name=\"k\" string=\"false\">12345678901234567890</" DSML "parameter>\n"
        "</" DSML "invoke>\n</" DSML "tool_calls>" EOS);
}

static void expect_render_error(const char *messages, const ds4_chat_opts *o, const char *needle) {
    ds4_json_doc *doc;
    ds4err err = {0};
    assert_int_equal(ds4_json_parse(messages, strlen(messages), "m", &doc, &err), 0);
    ds4_chat_msg *msgs = NULL;
    size_t n = 0;
    int rc = chat_msgs_from_json(ds4_json_root(doc), &msgs, &n, &err);
    if (rc == 0) {
        ds4_buf out = {0};
        rc = ds4_chat_render(msgs, n, o, &out, &err);
        ds4_buf_free(&out);
        free(msgs);
    }
    assert_int_equal(rc, -1);
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    ds4_json_free(doc);
}

static void test_render_errors(void **state) {
    (void)state;
    expect_render_error("[{\"role\":\"developer\",\"content\":\"\"}]", &chat_mode,
                        "developer message needs content");
    expect_render_error("[{\"role\":\"user\",\"content\":\"a\",\"task\":\"nope\"}]", &chat_mode,
                        "invalid task \"nope\"");
    expect_render_error("[{\"role\":\"robot\"}]", &chat_mode, "messages[0]");
    expect_render_error("[{\"role\":\"user\",\"content\":5}]", &chat_mode,
                        "messages[0].content must be a string");
    expect_render_error("{\"role\":\"user\"}", &chat_mode, "expected a JSON array");
    expect_render_error("[{\"role\":\"system\",\"tools\":{\"a\":1}}]", &chat_mode,
                        "\"tools\" must be a list");
    expect_render_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\"}}]}]",
                        &chat_mode, "needs function.name and function.arguments");
    expect_render_error("[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
                        "\"arguments\":\"[1]\"}}]}]", &chat_mode, "not an object");
}

/* --------------------------------------------------------- token ids */

/* A byte-level vocabulary small enough to derive ids by hand: the 256 byte
 * tokens (id = byte value), "he", "ll", "hell", "hello", "Ġw", "Ġworld"
 * with the merges that build them, then the seven specials. */
enum { V_HE = 256, V_LL, V_HELL, V_HELLO, V_GW, V_GWORLD, V_BOS, V_EOS, V_USER, V_ASSISTANT,
       V_THINK, V_THINK_END, V_DSML, V_COUNT };

typedef struct tiny {
    ds4_strref tok[V_COUNT];
    ds4_strref merges[9];
    unsigned char bytes[256][2];
    ds4_tokenizer t;
} tiny;

static void tiny_init(tiny *v) {
    uint32_t next = 256;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = printable ? b : next++;
        if (cp < 0x80) {
            v->bytes[b][0] = (unsigned char)cp;
            v->tok[b].len = 1;
        } else {
            v->bytes[b][0] = (unsigned char)(0xC0 | (cp >> 6));
            v->bytes[b][1] = (unsigned char)(0x80 | (cp & 63));
            v->tok[b].len = 2;
        }
        v->tok[b].ptr = (const char *)v->bytes[b];
    }
    static const char *const words[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "\xC4\xA0world"};
    for (int i = 0; i < 6; i++) {
        v->tok[V_HE + i].ptr = words[i];
        v->tok[V_HE + i].len = strlen(words[i]);
    }
    for (int s = 0; s < DS4_SPECIAL_COUNT; s++) {
        v->tok[V_BOS + s].ptr = ds4_tok_special_str(s);
        v->tok[V_BOS + s].len = strlen(ds4_tok_special_str(s));
    }
    /* "Ġwor" and "Ġworl" are merge results without tokens of their own. */
    static const char *const merges[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w",
                                         "o r", "\xC4\xA0w or", "\xC4\xA0wor l", "\xC4\xA0worl d"};
    for (int i = 0; i < 9; i++) {
        v->merges[i].ptr = merges[i];
        v->merges[i].len = strlen(merges[i]);
    }
    ds4err err = {0};
    if (ds4_tok_init(&v->t, v->tok, V_COUNT, NULL, v->merges, 9, &err)) fail_msg("%s", err.msg);
}

static void expect_ids(const ds4_tokens *got, const int32_t *want, size_t n) {
    if (got->n != n || memcmp(got->ids, want, n * sizeof(int32_t)) != 0) {
        fprintf(stderr, "got %zu ids:", got->n);
        for (size_t i = 0; i < got->n && i < 40; i++) fprintf(stderr, " %d", got->ids[i]);
        fprintf(stderr, "\n");
        fail();
    }
}

#define EXPECT_IDS(got, ...)                                              \
    do {                                                                  \
        const int32_t want_[] = {__VA_ARGS__};                            \
        expect_ids(got, want_, sizeof(want_) / sizeof(int32_t));          \
    } while (0)

/* ds4's command line on a vocabulary where every id is known. */
static void test_prompt_ids(void **state) {
    (void)state;
    tiny v;
    tiny_init(&v);
    ds4_tokens ids = {0};
    ds4err err = {0};
    /* -p "hello world" --nothink -sys "": the official-vector form. */
    assert_int_equal(ds4_chat_prompt_ids(&v.t, "", 0, "hello world", 11, &chat_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, V_BOS, V_USER, V_HELLO, V_GWORLD, V_ASSISTANT, V_THINK_END);
    ds4_tokens_free(&ids);
    /* No system turn at all: the same tokens. */
    assert_int_equal(ds4_chat_prompt_ids(&v.t, NULL, 0, "hello world", 11, &chat_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, V_BOS, V_USER, V_HELLO, V_GWORLD, V_ASSISTANT, V_THINK_END);
    ds4_tokens_free(&ids);
    /* --think with a system prompt "he": it comes right after BOS. */
    assert_int_equal(ds4_chat_prompt_ids(&v.t, "he", 2, "hello", 5, &thinking_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, V_BOS, V_HE, V_USER, V_HELLO, V_ASSISTANT, V_THINK);
    ds4_tokens_free(&ids);
    /* Prompt bytes are used as given: a trailing newline stays. */
    assert_int_equal(ds4_chat_prompt_ids(&v.t, NULL, 0, "hello\n", 6, &chat_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, V_BOS, V_USER, V_HELLO, '\n', V_ASSISTANT, V_THINK_END);
    ds4_tokens_free(&ids);
    /* Special strings typed in a prompt are special tokens, as in the
     * official pipeline (ds4 would spell them out). */
    assert_int_equal(ds4_chat_prompt_ids(&v.t, NULL, 0, "he</think>", 10, &chat_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, V_BOS, V_USER, V_HE, V_THINK_END, V_ASSISTANT, V_THINK_END);
    ds4_tokens_free(&ids);
    /* A prompt that starts with BOS is already rendered: system and mode are
     * ignored. */
    const char pre[] = BOS USER "hello world" ASSISTANT "</think>hello";
    assert_int_equal(ds4_chat_prompt_ids(&v.t, "sys", 3, pre, sizeof(pre) - 1, &thinking_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, V_BOS, V_USER, V_HELLO, V_GWORLD, V_ASSISTANT, V_THINK_END, V_HELLO);
    ds4_tokens_free(&ids);
    /* The default system prompt is ds4's. */
    assert_string_equal(DS4_CHAT_DEFAULT_SYSTEM, "You are a helpful assistant");
    ds4_tok_free(&v.t);
}

static void test_ids_need_added_tokens(void **state) {
    (void)state;
    tiny v;
    tiny_init(&v);
    ds4_chat_msg m[2];
    memset(m, 0, sizeof(m));
    m[0].role = DS4_ROLE_LATEST_REMINDER;
    m[0].content = "x";
    m[0].content_len = 1;
    m[1].role = DS4_ROLE_USER;
    ds4_tokens ids = {0};
    ds4err err = {0};
    assert_int_equal(ds4_chat_render_ids(&v.t, m, 2, &chat_mode, &ids, &err), -1);
    assert_non_null(strstr(err.msg, "no added token \"<\xEF\xBD\x9Clatest_reminder\xEF\xBD\x9C>\""));
    m[0].role = DS4_ROLE_USER;
    m[0].task = "action";
    assert_int_equal(ds4_chat_render_ids(&v.t, m, 1, &chat_mode, &ids, &err), -1);
    assert_non_null(strstr(err.msg, "action"));
    ds4_tokens_free(&ids);
    ds4_tok_free(&v.t);
    /* Without the seven specials nothing renders. */
    v.tok[V_DSML].ptr = "DSML";
    v.tok[V_DSML].len = 4;
    assert_int_equal(ds4_tok_init(&v.t, v.tok, V_COUNT, NULL, v.merges, 9, &err), 0);
    assert_int_equal(ds4_chat_prompt_ids(&v.t, NULL, 0, "hi", 2, &chat_mode, &ids, &err), -1);
    assert_non_null(strstr(err.msg, DSML));
    ds4_tok_free(&v.t);
}

/* ------------------------------------- the DeepSeek vocabulary, V4-like */

#define SHARED_TOKENIZER "../shared/tokenizer/deepseek_v3_tokenizer.json.xz"
#define SHARED_PEER "../shared/tokenizer/peer_tokenize.jsonl"

typedef struct v4like {
    ds4_vocab v;
    ds4_tokenizer t;
} v4like;

/* The V3 tokenizer.json lacks V4's chat tokens; these ten placeholder ids
 * (<｜place▁holder▁no▁790..799｜>, all special) get their strings, in
 * ds4ref and in the Hugging Face run that produced the expected ids. */
static const struct { int32_t id; const char *s; } v4_tokens[] = {
    {128790, "<\xEF\xBD\x9C" "action\xEF\xBD\x9C>"}, {128791, "<\xEF\xBD\x9Cquery\xEF\xBD\x9C>"},
    {128792, "<\xEF\xBD\x9C" "authority\xEF\xBD\x9C>"}, {128793, "<\xEF\xBD\x9C" "domain\xEF\xBD\x9C>"},
    {128794, "<\xEF\xBD\x9Ctitle\xEF\xBD\x9C>"}, {128795, "<\xEF\xBD\x9Cread_url\xEF\xBD\x9C>"},
    {128796, "<\xEF\xBD\x9Clatest_reminder\xEF\xBD\x9C>"}, {128797, DSML},
    {128798, "<think>"}, {128799, "</think>"},
};

static int v4like_setup(void **state) {
    *state = NULL;
    if (access(SHARED_TOKENIZER, R_OK) != 0 || system("xz --version >/dev/null 2>&1") != 0) {
        printf("skipping: %s or xz not available\n", SHARED_TOKENIZER);
        return 0;
    }
    v4like *o = calloc(1, sizeof(*o));
    ds4err err = {0};
    if (!o || xz_hf_vocab(&o->v, SHARED_TOKENIZER, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        free(o);
        return -1;
    }
    for (size_t i = 0; i < sizeof(v4_tokens) / sizeof(v4_tokens[0]); i++) {
        o->v.tokens[v4_tokens[i].id].ptr = v4_tokens[i].s;
        o->v.tokens[v4_tokens[i].id].len = strlen(v4_tokens[i].s);
        o->v.types[v4_tokens[i].id] = DS4_TOKTYPE_CONTROL;
    }
    if (ds4_tok_init(&o->t, o->v.tokens, o->v.n_tokens, o->v.types, o->v.merges, o->v.n_merges, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        ds4_hf_vocab_free(&o->v);
        free(o);
        return -1;
    }
    *state = o;
    return 0;
}

static int v4like_teardown(void **state) {
    v4like *o = *state;
    if (o) {
        ds4_tok_free(&o->t);
        ds4_hf_vocab_free(&o->v);
        free(o);
    }
    return 0;
}

static void render_ids_json(const ds4_tokenizer *t, const char *messages, const ds4_chat_opts *o,
                            ds4_tokens *ids) {
    ds4_json_doc *doc;
    ds4err err = {0};
    assert_int_equal(ds4_json_parse(messages, strlen(messages), "messages", &doc, &err), 0);
    ds4_chat_msg *msgs;
    size_t n;
    assert_int_equal(chat_msgs_from_json(ds4_json_root(doc), &msgs, &n, &err), 0);
    if (ds4_chat_render_ids(t, msgs, n, o, ids, &err)) fail_msg("%s", err.msg);
    free(msgs);
    ds4_json_free(doc);
}

static void test_v4like_fixture_ids(void **state) {
    v4like *o = *state;
    if (!o) {
        tu_skipping("%s or xz not available", SHARED_TOKENIZER);
        skip();
    }
    ds4_tokens ids = {0};
    render_ids_json(&o->t, in2, &thinking_mode, &ids);
    EXPECT_IDS(&ids, 0, 3476, 477, 260, 11502, 22896, 16, 128803, 19923, 128804, 128799, 23166, 1031,
               3, 1730, 588, 342, 1694, 440, 33, 1, 128803, 3085, 344, 270, 6102, 294, 8760, 33,
               128804, 128798, 671, 3967, 20407, 943, 270, 6102, 294, 8760, 16, 983, 344, 11111, 16,
               128799, 671, 6102, 294, 8760, 344, 11111, 16, 1);
    ds4_tokens_free(&ids);

    /* Case 3: 820 ids; the last 96, from the first <｜Assistant｜> on, hold
     * the DSML tool call and the merged tool result. */
    static const int32_t tail3[] = {
        128804, 128798, 6640, 53982, 844, 93432, 4613, 6007, 548, 2451, 7865, 21733, 24329, 4512,
        33491, 320, 128799, 271, 30, 128797, 72461, 4941, 12548, 1018, 30, 128797, 40148, 5406,
        2329, 1281, 14346, 3816, 30, 128797, 41523, 2329, 1281, 403, 13241, 4, 3418, 1281, 11476,
        3320, 844, 93432, 4613, 6007, 223, 2451, 7865, 21733, 223, 49978, 223, 117214, 1718,
        128797, 41523, 1018, 1718, 128797, 40148, 5406, 1018, 1718, 128797, 72461, 4941, 12548, 32,
        1, 128803, 30, 72461, 46148, 86594, 18, 63, 1718, 72461, 46148, 32, 128804, 128798, 2792,
        3257, 3355, 9090, 320, 128799, 2788, 7981, 61060, 320, 1,
    };
    render_ids_json(&o->t, in3, &thinking_mode, &ids);
    assert_int_equal(ids.n, 820);
    assert_memory_equal(ids.ids + 820 - 96, tail3, sizeof(tail3));
    ds4_tokens_free(&ids);
}

/* -p TEXT --nothink -sys "" on an official-vector prompt: BOS, <｜User｜>,
 * the peer's ids for TEXT, <｜Assistant｜>, </think>. */
static void test_v4like_official_vector_form(void **state) {
    v4like *o = *state;
    if (!o) {
        tu_skipping("%s or xz not available", SHARED_TOKENIZER);
        skip();
    }
    FILE *f = fopen(SHARED_PEER, "rb");
    if (!f) {
        printf("skipping: %s not found\n", SHARED_PEER);
        skip();
    }
    static char line[1 << 20];
    int checked = 0;
    while (fgets(line, sizeof(line), f)) {
        ds4_json_doc *doc;
        ds4err err = {0};
        assert_int_equal(ds4_json_parse(line, strlen(line), SHARED_PEER, &doc, &err), 0);
        const ds4_json *text = ds4_json_get(ds4_json_root(doc), "text");
        const ds4_json *want = ds4_json_get(ds4_json_root(doc), "ids");
        ds4_tokens ids = {0};
        assert_int_equal(ds4_chat_prompt_ids(&o->t, "", 0, text->str, text->len, &chat_mode, &ids, &err), 0);
        assert_int_equal(ids.n, want->n + 4);
        assert_int_equal(ids.ids[0], 0);
        assert_int_equal(ids.ids[1], 128803);
        for (size_t i = 0; i < want->n; i++) assert_int_equal(ids.ids[2 + i], (int32_t)want->elems[i].num);
        assert_int_equal(ids.ids[want->n + 2], 128804);
        assert_int_equal(ids.ids[want->n + 3], 128799);
        ds4_tokens_free(&ids);
        ds4_json_free(doc);
        checked++;
    }
    fclose(f);
    assert_int_equal(checked, 65);

    /* Default system prompt, --think, and a user who types <think>. */
    ds4_tokens ids = {0};
    ds4err err = {0};
    assert_int_equal(ds4_chat_prompt_ids(&o->t, DS4_CHAT_DEFAULT_SYSTEM, strlen(DS4_CHAT_DEFAULT_SYSTEM),
                                         "hi<think>", 9, &thinking_mode, &ids, &err), 0);
    EXPECT_IDS(&ids, 0, 3476, 477, 260, 11502, 22896, 128803, 6366, 128798, 128804, 128798);
    ds4_tokens_free(&ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_fixture_1),
        cmocka_unit_test(test_official_fixture_2),
        cmocka_unit_test(test_official_fixture_3),
        cmocka_unit_test(test_official_fixture_4),
        cmocka_unit_test(test_render_turns),
        cmocka_unit_test(test_render_efforts),
        cmocka_unit_test(test_render_tool_calls),
        cmocka_unit_test(test_render_python_values),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_prompt_ids),
        cmocka_unit_test(test_ids_need_added_tokens),
    };
    const struct CMUnitTest v4_tests[] = {
        cmocka_unit_test(test_v4like_fixture_ids),
        cmocka_unit_test(test_v4like_official_vector_form),
    };
    int fails = cmocka_run_group_tests(tests, NULL, NULL);
    fails += cmocka_run_group_tests_name("DeepSeek vocabulary", v4_tests, v4like_setup, v4like_teardown);
    return fails;
}
