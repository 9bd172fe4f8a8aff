// relent/rtb: an OpenRTB exchange and bidder that hold their deadline, on relent's
// decision core. Every export is named here (no `export *`).

export { createExchange, READ_CHECK_INTERVAL_MS, LOSS_REASONS } from './exchange.js';
export type {
  Exchange,
  ExchangeOptions,
  ExchangeStats,
  PartnerStats,
  AuctionSummary,
  AuctionOutcome,
  AuctionReason,
  PartnerResult,
  PartnerOutcome,
  PartnerBreakerChange,
  PartnerLimitChange,
  PartnerLimitStats,
  ListenInfo,
  CloseOptions,
  WarmupReport,
} from './exchange.js';
export { createBidder } from './bidder.js';
export type { Bidder, BidderOptions, BidderStats, BidderBehaviour, BidderRequestInfo, BidderListenInfo } from './bidder.js';
export { resolveExchangeConfig, resolveBidderConfig, EXCHANGE_DEFAULTS, BIDDER_DEFAULTS, PARTNER_BREAKER_DEFAULTS } from './config.js';
export type {
  ExchangeConfig,
  PartnerConfig,
  NoticeConfig,
  WarmupConfig,
  ResolvedExchangeConfig,
  ResolvedPartner,
  ResolvedNotices,
  BidderConfig,
  ResolvedBidderConfig,
  LatencySpec,
  PriceSpec,
  FailureSpec,
} from './config.js';
export { checkBidRequest, REQUEST_LIMITS_DEFAULTS } from './model.js';
export type { BidRequest, Imp, BidResponse, SeatBid, Bid, Extra, RequestCheck, RequestLimits } from './model.js';
export { NO_BID_REASONS, EXCHANGE_SPECIFIC_NBR_MIN, describeNoBidReason, isNbr } from './nbr.js';
export type { NoBidReasonEntry, NoBidReason, NoBidReasonKind } from './nbr.js';
export { classifyBidAnswer } from './answer.js';
export type { PartnerAnswer, NoBidForm, AnswerError, ReceivedBid } from './answer.js';
export type { MacroValues } from './macros.js';
export type { Candidate, Winner, Selection, BidRejection, BidFate } from './select.js';
export { WIN_NOTICE_OVERRIDES, NOTICE_WORKER_DEFAULTS } from './notices.js';
export type { NoticeKind, NoticeCounters, NoticeStats, NoticeOutlet, Notice, Billable, BillingEventResult } from './notices.js';
export type { SkipReason, PartnerCounters } from './partner.js';
export type { LatencySummary, Histogram, SparseHistogram } from './stats.js';
