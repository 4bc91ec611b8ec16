"""Annotate RL frameworks with rlscope's operations through their own extension points
(callbacks, environment wrappers, module hooks), without forking them: ``rlscope.integrations.sb3``."""
