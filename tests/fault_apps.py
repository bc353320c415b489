"""A deliberately broken OpenAI-compatible teacher, for the reliability tests (served with LocalServer).

    LocalServer("tests.fault_apps:create_app", factory=True, env={"FAULT_DELAY": "30"})

The fault is the model name asked for, so one server plays every broken teacher:
    slow      every chat completion waits FAULT_DELAY seconds (default 30) before answering
    garbage   HTTP 200 with a body that is not JSON
    wrong     HTTP 200 with JSON that is not a chat completion
    flaky     the real local teacher (helpers.chain_sum.local_teacher, no mistakes) for FAULT_GOOD_REPLIES replies
              (default 3), then HTTP 500 "teacher overloaded" for good
"""

import asyncio
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from helpers.chain_sum.local_teacher import TeacherPolicy, chat_completion

FAULTS = ("slow", "garbage", "wrong", "flaky")


def create_app():
    delay = float(os.environ.get("FAULT_DELAY", "30"))
    good_replies = int(os.environ.get("FAULT_GOOD_REPLIES", "3"))
    policy = TeacherPolicy(mistake_rate=0.0)
    served = {fault: 0 for fault in FAULTS}
    app = FastAPI(title="broken teacher")

    @app.get("/health")
    def health():
        return {"status": "ok", "requests": served}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": f, "object": "model", "created": 0, "owned_by": "x"}
                                           for f in FAULTS]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request):
        body = await request.json()
        fault = body.get("model")
        if fault not in FAULTS:
            return JSONResponse({"error": {"message": f"unknown model {fault!r}"}}, status_code=404)
        served[fault] += 1
        if fault == "slow":
            await asyncio.sleep(delay)
            return chat_completion(policy, body, fault)
        if fault == "garbage":
            return PlainTextResponse('<html><body>502 Bad Gateway {"choices": [', status_code=200,
                                     media_type="application/json")
        if fault == "wrong":
            return {"hello": "world", "choices": "none"}
        if served[fault] <= good_replies:
            return chat_completion(policy, body, fault)
        return JSONResponse({"error": {"message": "teacher overloaded", "type": "server_error"}}, status_code=500)

    return app
