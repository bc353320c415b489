"""The baseline of the env-server benchmark: reasoning_gym served the way OpenEnv does by default.

Same environment class as ours, but `create_app` is left at its default session cap (1) and the
server is run by plain `uvicorn` with its default logging (INFO, access log, a line per
connection), which is what a first deployment looks like.
"""

from openenv.core.env_server.http_server import create_app

from reasoning_gym_env.models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState
from reasoning_gym_env.server.environment import ReasoningGymEnvironment

app = create_app(ReasoningGymEnvironment, ReasoningGymAction, ReasoningGymObservation,
                 env_name="reasoning_gym", state_cls=ReasoningGymState)
